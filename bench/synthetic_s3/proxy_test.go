package main

// --upstream: what the virtual bucket does not own reaches the upstream byte for byte (the
// request line, the Host the client signed, every end-to-end header, the body), its answer
// comes back as the upstream wrote it, bodies stream both ways, 100-continue is the
// upstream's, and upstream connections are reused. tests/test_synthetic_s3.py proves the
// same against MinIO, whose SigV4 check fails on any change.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seen is what the upstream received of one request.
type seen struct {
	method, requestURI, host string
	header                   http.Header
	body                     []byte
	contentLength            int64
	transferEncoding         []string
}

type fakeUpstream struct {
	*httptest.Server
	mu          sync.Mutex
	requests    []seen
	connections atomic.Int64
	handle      func(w http.ResponseWriter, r *http.Request) bool // true: it answered
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	u := &fakeUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.handle != nil && u.handle(w, r) {
			return
		}
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.requests = append(u.requests, seen{r.Method, r.RequestURI, r.Host, r.Header.Clone(), body,
			r.ContentLength, r.TransferEncoding})
		u.mu.Unlock()
		h := w.Header()
		h["x-amz-request-id"] = []string{"UPSTREAM-ID"}
		h["ETag"] = []string{`"upstream-etag"`}
		h["Server"] = []string{"MinIO"}
		answer := "upstream answers " + r.Method
		h["Content-Length"] = []string{fmt.Sprint(len(answer))}
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			io.WriteString(w, answer)
		}
	}))
	u.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			u.connections.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) last(t *testing.T) seen {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.requests) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return u.requests[len(u.requests)-1]
}

func (u *fakeUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

// frontFor is a synthetic-s3 of 3,000 objects in bucket "synthetic" passing the rest to upstream.
func frontFor(t *testing.T, upstream string) *httptest.Server {
	u, err := parseUpstream(upstream)
	if err != nil {
		t.Fatal(err)
	}
	server := &s3Server{bucket: testBucket(t, 3000, 2000, 12000), region: "us-east-1",
		upstream: newUpstreamProxy(u, log.New(io.Discard, "", 0))}
	front := httptest.NewServer(server)
	t.Cleanup(front.Close)
	return front
}

// raw sends the request text as it is (request line and headers; "\r\n" line ends added)
// and a body, on a connection of its own, and reads the answer.
func raw(t *testing.T, addr, head string, body []byte) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	text := strings.ReplaceAll(strings.TrimSpace(head), "\n", "\r\n") + "\r\n\r\n"
	if _, err := conn.Write(append([]byte(text), body...)); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(head, " ")
	response, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response, answer
}

func TestUpstreamGetsTheRequestUnchanged(t *testing.T) {
	upstream := newFakeUpstream(t)
	front := frontFor(t, upstream.URL)
	addr := front.Listener.Addr().String()
	body := bytes.Repeat([]byte("part of an archive\n"), 5000)

	// A signed UploadPart as botocore writes it, its key percent-encoded (space, "+", "~",
	// an encoded "/" and "%"), its query in an order Go would not write.
	uri := "/archive-bucket/a/day%20one/x+y~z%2Fw%25.tar.gz?uploadId=Zm9v%2Bbar%3D&partNumber=3"
	head := fmt.Sprintf(`PUT %s HTTP/1.1
Host: %s
User-Agent: Boto3/1.35 md/Botocore#1.35
Authorization: AWS4-HMAC-SHA256 Credential=minio/20261102/us-east-1/s3/aws4_request, SignedHeaders=content-md5;host;x-amz-content-sha256;x-amz-date, Signature=0123abcd
X-Amz-Date: 20261102T000000Z
X-Amz-Content-Sha256: %x
Content-MD5: 1B2M2Y8AsgTpgAEAAAAAAA==
X-Amz-Meta-Note: kept as sent
Accept-Encoding: identity
Content-Length: %d`, uri, addr, sha256.Sum256(body), len(body))
	response, answer := raw(t, addr, head, body)
	if response.StatusCode != 200 || string(answer) != "upstream answers PUT" {
		t.Fatalf("answer %d %q", response.StatusCode, answer)
	}
	// The upstream's answer as it wrote it: its headers, none of ours.
	if got := response.Header.Values("X-Amz-Request-Id"); len(got) != 1 || got[0] != "UPSTREAM-ID" {
		t.Errorf("x-amz-request-id %v", got)
	}
	if response.Header.Get("ETag") != `"upstream-etag"` || response.Header.Get("Server") != "MinIO" ||
		response.Header.Get("X-Amz-Id-2") != "" {
		t.Errorf("answer's headers %v", response.Header)
	}
	got := upstream.last(t)
	if got.method != "PUT" || got.requestURI != uri {
		t.Errorf("upstream got %s %s, want PUT %s", got.method, got.requestURI, uri)
	}
	if got.host != addr {
		t.Errorf("upstream got Host %q, the client signed %q", got.host, addr)
	}
	for name, want := range map[string]string{
		"User-Agent":           "Boto3/1.35 md/Botocore#1.35",
		"Authorization":        "AWS4-HMAC-SHA256 Credential=minio/20261102/us-east-1/s3/aws4_request, SignedHeaders=content-md5;host;x-amz-content-sha256;x-amz-date, Signature=0123abcd",
		"X-Amz-Date":           "20261102T000000Z",
		"X-Amz-Content-Sha256": fmt.Sprintf("%x", sha256.Sum256(body)),
		"Content-Md5":          "1B2M2Y8AsgTpgAEAAAAAAA==",
		"X-Amz-Meta-Note":      "kept as sent",
		"Accept-Encoding":      "identity",
	} {
		if values := got.header.Values(name); len(values) != 1 || values[0] != want {
			t.Errorf("upstream got %s %q, want %q", name, values, want)
		}
	}
	for name := range got.header {
		if strings.HasPrefix(strings.ToLower(name), "x-forwarded") || name == "Forwarded" || name == "Via" {
			t.Errorf("the proxy added %s", name)
		}
	}
	if !bytes.Equal(got.body, body) || got.contentLength != int64(len(body)) || len(got.transferEncoding) != 0 {
		t.Errorf("upstream got %d bytes (Content-Length %d, %v), want %d", len(got.body), got.contentLength,
			got.transferEncoding, len(body))
	}

	// A request without Accept-Encoding reaches the upstream without one (no gzip asked for).
	raw(t, addr, fmt.Sprintf("GET /archive-bucket/a/x.tar.gz HTTP/1.1\nHost: %s", addr), nil)
	if got := upstream.last(t); got.header.Get("Accept-Encoding") != "" || got.requestURI != "/archive-bucket/a/x.tar.gz" {
		t.Errorf("upstream got %s with Accept-Encoding %q", got.requestURI, got.header.Get("Accept-Encoding"))
	}
}

func TestUpstreamRouting(t *testing.T) {
	upstream := newFakeUpstream(t)
	front := frontFor(t, upstream.URL)
	addr := front.Listener.Addr().String()
	key := "/synthetic/day/host-0000/app-000000007.log"
	for _, c := range []struct {
		request    string
		toUpstream bool
		status     int
	}{
		{"GET / HTTP/1.1", true, 200},                                   // ListBuckets
		{"HEAD /archive-bucket HTTP/1.1", true, 200},                    // HeadBucket of another bucket
		{"PUT /archive-bucket HTTP/1.1", true, 200},                     // CreateBucket
		{"POST /archive-bucket/a/x.tar.gz?uploads HTTP/1.1", true, 200}, // CreateMultipartUpload
		{"DELETE /archive-bucket/a/x.lease.json HTTP/1.1", true, 200},
		{"GET /archive-bucket?list-type=2&prefix=a/ HTTP/1.1", true, 200},
		{"GET /synthetic-other/k HTTP/1.1", true, 200}, // a bucket whose name begins as the virtual one's
		{"GET /synthetic?list-type=2&max-keys=2 HTTP/1.1", false, 200},
		{"HEAD /synthetic HTTP/1.1", false, 200},
		{"GET " + key + " HTTP/1.1", false, 200},
		{"GET " + key + "?tagging HTTP/1.1", false, 200},
		{"GET /synthetic/day/missing.log HTTP/1.1", false, 404},
		{"PUT " + key + " HTTP/1.1", false, 403}, // the virtual bucket stays read-only
		{"DELETE " + key + " HTTP/1.1", false, 403},
	} {
		before := upstream.count()
		response, _ := raw(t, addr, c.request+"\nHost: "+addr+"\nContent-Length: 0", nil)
		reached := upstream.count() > before
		if reached != c.toUpstream || response.StatusCode != c.status {
			t.Errorf("%s: upstream reached %v (want %v), status %d (want %d)", c.request, reached, c.toUpstream,
				response.StatusCode, c.status)
		}
		if !c.toUpstream && response.Header.Get("X-Amz-Id-2") != "synthetic-s3" {
			t.Errorf("%s: not answered by the virtual bucket", c.request)
		}
	}
}

// A body is passed on while it arrives, both ways: the far side sees the first MiB before the
// near side has sent the rest.
func TestUpstreamStreamsBodies(t *testing.T) {
	const size, first = 48 << 20, 1 << 20
	upstream := newFakeUpstream(t)
	gotFirst, readFirst := make(chan struct{}), make(chan struct{})
	var uploaded atomic.Int64
	var uploadSum [32]byte
	upstream.handle = func(w http.ResponseWriter, r *http.Request) bool {
		switch r.Method {
		case http.MethodPut:
			d := sha256.New()
			if _, err := io.CopyN(d, r.Body, first); err != nil {
				t.Error(err)
			}
			close(gotFirst)
			n, _ := io.Copy(d, r.Body)
			uploaded.Store(first + n)
			d.Sum(uploadSum[:0])
			w.WriteHeader(http.StatusOK)
		case http.MethodGet:
			w.Header().Set("Content-Length", fmt.Sprint(size))
			w.WriteHeader(http.StatusOK)
			w.Write(bytes.Repeat([]byte{'a'}, first))
			w.(http.Flusher).Flush()
			select {
			case <-readFirst:
			case <-time.After(10 * time.Second):
				t.Error("download: the client did not get the first MiB before the upstream sent the rest")
			}
			for sent := first; sent < size; sent += first {
				w.Write(bytes.Repeat([]byte{'b'}, first))
			}
		}
		return true
	}
	front := frontFor(t, upstream.URL)

	pipeReader, pipeWriter := io.Pipe()
	want := sha256.New()
	go func() {
		chunk := bytes.Repeat([]byte("0123456789abcdef"), first/16)
		want.Write(chunk)
		pipeWriter.Write(chunk)
		select {
		case <-gotFirst:
		case <-time.After(10 * time.Second):
			t.Error("upload: the upstream did not get the first MiB before the client sent the rest")
		}
		for sent := first; sent < size; sent += first {
			want.Write(chunk)
			pipeWriter.Write(chunk)
		}
		pipeWriter.Close()
	}()
	request, _ := http.NewRequest(http.MethodPut, front.URL+"/archive-bucket/big.tar.gz", pipeReader)
	request.ContentLength = size
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != 200 || uploaded.Load() != size || !bytes.Equal(uploadSum[:], want.Sum(nil)) {
		t.Fatalf("upload: status %d, %d bytes arrived of %d, same bytes %v", response.StatusCode, uploaded.Load(),
			size, bytes.Equal(uploadSum[:], want.Sum(nil)))
	}

	response, err = http.Get(front.URL + "/archive-bucket/big.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	if response.ContentLength != size {
		t.Errorf("download: Content-Length %d, want %d", response.ContentLength, size)
	}
	if _, err := io.CopyN(io.Discard, response.Body, first); err != nil {
		t.Fatal(err)
	}
	close(readFirst)
	rest, _ := io.Copy(io.Discard, response.Body)
	if first+rest != size {
		t.Errorf("download: %d bytes of %d", first+rest, size)
	}
}

// Expect: 100-continue: the client hears the upstream's 100 before it sends the body; an
// upstream that refuses at once is answered without the body being sent.
func TestUpstreamExpectContinue(t *testing.T) {
	upstream := newFakeUpstream(t)
	upstream.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/denied/") {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return false
	}
	front := frontFor(t, upstream.URL)
	addr := front.Listener.Addr().String()
	body := []byte("the body, sent after 100 Continue")

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "PUT /archive-bucket/k HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n",
		addr, len(body))
	reader := bufio.NewReader(conn)
	status, err := reader.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 100 ") {
		t.Fatalf("before the body: %q, %v", status, err)
	}
	for line, _ := reader.ReadString('\n'); line != "\r\n" && line != ""; line, _ = reader.ReadString('\n') {
	}
	conn.Write(body)
	response, err := http.ReadResponse(reader, &http.Request{Method: "PUT"})
	if err != nil || response.StatusCode != 200 {
		t.Fatalf("after the body: %v, %v", response, err)
	}
	if got := upstream.last(t); string(got.body) != string(body) || got.header.Get("Expect") != "100-continue" {
		t.Errorf("upstream got %q, Expect %q", got.body, got.header.Get("Expect"))
	}

	// Refused before the body: the client gets the 403 without having sent it.
	denied, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer denied.Close()
	denied.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(denied, "PUT /denied/k HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n", addr)
	response, err = http.ReadResponse(bufio.NewReader(denied), &http.Request{Method: "PUT"})
	if err != nil || response.StatusCode != http.StatusForbidden {
		t.Fatalf("refused: %v, %v", response, err)
	}
}

// Upstream connections are reused: about one per request in flight (a dial raced by a
// connection coming free adds one to the pool), not one per request.
func TestUpstreamKeepsConnectionsAlive(t *testing.T) {
	upstream := newFakeUpstream(t)
	front := frontFor(t, upstream.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var wg sync.WaitGroup
	for worker := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				response, err := client.Get(fmt.Sprintf("%s/archive-bucket/w%d-%d", front.URL, worker, i))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, response.Body)
				response.Body.Close()
			}
		}()
	}
	wg.Wait()
	if n := upstream.connections.Load(); n > 16 {
		t.Errorf("400 requests over 8 client connections opened %d upstream connections", n)
	}
	if upstream.count() != 400 {
		t.Errorf("upstream answered %d of 400", upstream.count())
	}
}

func TestUpstreamDownIsBadGateway(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + listener.Addr().String()
	listener.Close()
	front := frontFor(t, closed)
	response, err := http.Get(front.URL + "/archive-bucket/k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(response.Body)
	response.Body.Close()
	if response.StatusCode != http.StatusBadGateway || !bytes.Contains(body, []byte("<Code>BadGateway</Code>")) {
		t.Errorf("status %d, %s", response.StatusCode, body)
	}
	// The virtual bucket does not need the upstream.
	if response, err := http.Get(front.URL + "/synthetic/day/host-0000/app-000000001.log"); err != nil || response.StatusCode != 200 {
		t.Errorf("virtual bucket: %v, %v", response, err)
	}
}

func TestParseUpstream(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:9000", "https://minio.local:9000/", "http://[::1]:9000"} {
		if _, err := parseUpstream(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:9000", "ftp://h:1", "http://h:1/base", "http://h:1?x=1", "http://u:p@h:1", "http://"} {
		if _, err := parseUpstream(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
