package main

// The upstream: with --upstream URL, every request the virtual bucket does not own is passed
// to another S3 endpoint (MinIO in the benches) unchanged, so one endpoint URL reads the
// virtual bucket and writes the archive bucket. A client that takes one endpoint for its
// source and its destination (the archiver's --endpoint-url) then reads from here and writes
// to the upstream through here.
//
// What "unchanged" means, for SigV4 signatures to stay valid at the upstream: the method, the
// path exactly as the client encoded it (RawPath), the query string byte for byte, the Host
// header the client signed (this server's host:port, not the upstream's), and every header as
// received except the hop-by-hop ones (Connection, Keep-Alive, TE, Transfer-Encoding, Upgrade,
// Proxy-*), which no S3 client signs. No X-Forwarded-* header is added. Bodies stream both
// ways through a 64 KiB buffer: an upload of any size is never held here. Expect:
// 100-continue is answered by the upstream (its 100 is forwarded before the body is sent), and
// connections to the upstream are kept alive and pooled.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// proxyBuffers are the copy buffers of bodies in flight, reused across requests.
type proxyBuffers struct{ pool sync.Pool }

func (b *proxyBuffers) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 64<<10)
}

func (b *proxyBuffers) Put(buf []byte) { b.pool.Put(&buf) }

// parseUpstream checks an --upstream URL: http or https, a host, no path, query or fragment
// (a request's path is the client's, so a base path would change what the client signed).
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--upstream %q: %v", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("--upstream %q: want http://host:port or https://host:port, without path or query", raw)
	}
	return u, nil
}

// newUpstreamProxy is the handler that passes a request to upstream as it was received.
func newUpstreamProxy(upstream *url.URL, errorLog *log.Logger) *httputil.ReverseProxy {
	transport := &http.Transport{
		Proxy:       nil, // never an HTTP(S)_PROXY of the environment: the upstream is where it says
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// A client keeps up to its pool's size of requests in flight; every one of them has
		// its own upstream connection, kept for the next request instead of closed.
		MaxIdleConns:        0, // no limit in all
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		// Wait up to 1 s for the upstream's 100 Continue before sending a body the client
		// asked it about; that 100 is forwarded to the client, which then sends the body.
		ExpectContinueTimeout: time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		// The client's Accept-Encoding (or none) goes to the upstream as it is, and its
		// answer comes back as it is: no gzip asked for and undone here.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// pr.Out is a clone of pr.In without the hop-by-hop and X-Forwarded headers: its
			// path (Path and RawPath) is the client's. Only where it goes changes.
			pr.Out.URL.Scheme = upstream.Scheme
			pr.Out.URL.Host = upstream.Host
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery // byte for byte, even what Go does not parse
			pr.Out.Host = pr.In.Host                 // the Host the client signed
		},
		Transport:  transport,
		BufferPool: &proxyBuffers{},
		ErrorLog:   errorLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client went away: nobody to answer
			}
			errorLog.Printf("upstream %s %s: %v", r.Method, r.URL.RequestURI(), err)
			h := w.Header()
			h["x-amz-request-id"] = []string{"synthetic-s3-upstream"}
			(&s3Server{}).fail(w, r, http.StatusBadGateway, "BadGateway",
				"synthetic-s3 could not reach its upstream: "+err.Error())
		},
	}
}

// forUpstream says whether a request goes to the upstream: everything but the virtual
// bucket's own requests (ListBuckets, another bucket's objects and subresources, HeadBucket
// of another bucket, writes to other buckets). Writes to the virtual bucket stay here and are
// refused (AccessDenied): the virtual bucket is read-only and wholly this server's.
func (s *s3Server) forUpstream(r *http.Request) bool {
	if s.upstream == nil {
		return false
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	if path == "" {
		return true
	}
	bucket, _, _ := strings.Cut(path, "/")
	return bucket != s.bucket.bucket
}

func newErrorLog() *log.Logger {
	return log.New(os.Stderr, "synthetic-s3: ", log.LstdFlags)
}
