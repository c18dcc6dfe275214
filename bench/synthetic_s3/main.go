// Command synthetic-s3 is an S3 endpoint for benchmarks that serves a virtual bucket of N
// objects computed from their keys (objects.go), so a bench can archive a day of ten million
// objects without seeding them (seeding MinIO runs at ~1,150 PUTs/s here: hours for 10M).
//
//	synthetic-s3 --listen 127.0.0.1:0 --bucket synthetic --prefix day/ --objects 10000000 \
//	    --size-min 2000 --size-max 12000 --seed 1
//
// With port 0 it picks a free port; the first line on stdout is always
// "listening on 127.0.0.1:NNNN", printed once the bucket is ready to serve.
//
// What it answers, path-style only (/{bucket}/{key}), as S3 does:
//   - ListObjectsV2 (prefix, delimiter with CommonPrefixes, max-keys up to 1000, start-after,
//     continuation-token, fetch-owner, encoding-type=url) and ListObjects (V1, marker), each
//     page computed from its start position in O(page + log N);
//   - HeadBucket, GetBucketLocation, GetBucketVersioning (never enabled), ListBuckets;
//   - HeadObject and GetObject: Range (a-b, a-, -n: 206 and Content-Range; 416 InvalidRange
//     past the end), partNumber=1, If-Match / If-Unmodified-Since (412), If-None-Match /
//     If-Modified-Since (304); ETag the quoted hex MD5 of the bytes; one fixed LastModified;
//   - GetObjectTagging: an empty TagSet (no object has tags: no x-amz-tagging-count);
//   - errors as S3's XML: NoSuchBucket, NoSuchKey, InvalidRange, PreconditionFailed,
//     InvalidArgument; writes (PUT, POST, DELETE) AccessDenied: the bucket is read-only;
//     other subresources NotImplemented.
//
// With --upstream URL, every other request (ListBuckets, any request to another bucket: its
// objects, HeadBucket, writes, multipart uploads) is passed to that S3 endpoint unchanged, Host
// header and signature included (proxy.go): one endpoint URL then reads the virtual bucket from
// here and writes an archive bucket on MinIO through here. Writes to the virtual bucket are
// still refused here.
//
// Not checked, by design: the Authorization header (any SigV4 signature, or none, is
// accepted), presigned-URL parameters, x-amz-content-sha256, ExpectedBucketOwner. Not served:
// virtual-hosted-style requests, versions, checksums (x-amz-checksum-mode is ignored), response-*
// overrides, multi-range requests (answered with the whole object, as S3 does).
package main

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	s3Namespace   = "http://s3.amazonaws.com/doc/2006-03-01/"
	xmlHeader     = `<?xml version="1.0" encoding="UTF-8"?>` + "\n"
	timeFormatGMT = "Mon, 02 Jan 2006 15:04:05 GMT"
	maxPageKeys   = 1000
	ownerID       = "5e7a7c1b0c3d4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"
	// Tokens name the index a page resumes at; the text in front makes a token from elsewhere
	// fail as S3's does (400 InvalidArgument) instead of resuming somewhere.
	tokenPrefix = "synthetic-s3:"
)

func main() {
	var c config
	var lastModified string
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on; port 0 picks a free port")
	region := flag.String("region", "us-east-1", "the bucket's region (HeadBucket, GetBucketLocation)")
	flag.StringVar(&c.bucket, "bucket", "synthetic", "bucket name")
	flag.StringVar(&c.prefix, "prefix", "day/", "prefix every key begins with")
	flag.Int64Var(&c.objects, "objects", 1_000_000, "number of objects")
	flag.Int64Var(&c.perHost, "per-host", 10_000, "objects per host-NNNN/ folder")
	flag.Int64Var(&c.sizeMin, "size-min", 2000, "smallest object, bytes")
	flag.Int64Var(&c.sizeMax, "size-max", 12000, "largest object, bytes")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the log text, sizes and offsets")
	upstreamURL := flag.String("upstream", "", "S3 endpoint (http://host:port) every request not for the "+
		"virtual bucket is passed to unchanged; without it they are answered NoSuchBucket")
	flag.StringVar(&lastModified, "last-modified", "2026-11-02T00:00:00Z",
		"LastModified of every object (RFC 3339); the log lines are of the day before")
	flag.Parse()

	modified, err := time.Parse(time.RFC3339, lastModified)
	if err != nil {
		fatal("--last-modified: %v", err)
	}
	c.lastModified = modified.UTC().Truncate(time.Second) // HTTP dates have seconds only
	handler := &s3Server{region: *region}
	errorLog := newErrorLog()
	if *upstreamURL != "" {
		upstream, err := parseUpstream(*upstreamURL)
		if err != nil {
			fatal("%v", err)
		}
		handler.upstream = newUpstreamProxy(upstream, errorLog)
	}
	started := time.Now()
	vb, err := newVirtualBucket(c)
	if err != nil {
		fatal("%v", err)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		fatal("listen: %v", err)
	}
	// The caller reads this line to learn the port: nothing may be printed before it.
	fmt.Printf("listening on %s\n", listener.Addr())
	fmt.Printf("bucket %s: %d objects under %q, %d-%d bytes, seed %d; pool %d bytes, %d starts, ready in %d ms\n",
		c.bucket, c.objects, c.prefix, c.sizeMin, c.sizeMax, c.seed, len(vb.pool), len(vb.starts),
		time.Since(started).Milliseconds())
	if handler.upstream != nil {
		fmt.Printf("other buckets: passed to %s\n", *upstreamURL)
	}

	handler.bucket = vb
	server := &http.Server{
		Handler:           handler,
		ErrorLog:          errorLog,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute, // clients keep pools of idle connections
	}
	fatal("serve: %v", server.Serve(listener))
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "synthetic-s3: "+format+"\n", args...)
	os.Exit(1)
}

type s3Server struct {
	bucket   *virtualBucket
	region   string
	upstream http.Handler // requests for other buckets, with --upstream (proxy.go); nil: none
	requests atomic.Uint64
}

// Buffers for bodies and listing pages, reused across requests: a GET would otherwise
// allocate its whole body each time.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 256<<10); return &b }}

func (s *s3Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.forUpstream(r) { // before any header of ours is set: the upstream's answer goes back as it is
		s.upstream.ServeHTTP(w, r)
		return
	}
	// Header names as S3 writes them (net/http sends a name as it is in the map).
	h := w.Header()
	h["x-amz-request-id"] = []string{fmt.Sprintf("%016X", s.requests.Add(1))}
	h["x-amz-id-2"] = []string{"synthetic-s3"}
	h["Server"] = []string{"AmazonS3"}

	// Path-style: /{bucket} or /{bucket}/{key}. r.URL.Path is already percent-decoded, as
	// S3 decodes a key; no mux, so nothing cleans "a/../b" into another key.
	path := strings.TrimPrefix(r.URL.Path, "/")
	var query url.Values
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
	if path == "" {
		if r.Method != http.MethodGet {
			s.fail(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
			return
		}
		s.listBuckets(w)
		return
	}
	bucket, key, _ := strings.Cut(path, "/")
	if bucket != s.bucket.bucket {
		s.fail(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist", "BucketName", bucket)
		return
	}
	switch {
	case r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodDelete:
		s.fail(w, r, http.StatusForbidden, "AccessDenied", "Access Denied (synthetic-s3 serves a read-only bucket)")
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		s.fail(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	case key == "":
		s.bucketRequest(w, r, query)
	default:
		s.objectRequest(w, r, key, query)
	}
}

// Bucket subresources this server does not have; a GET naming one is NotImplemented rather
// than taken for a listing.
var bucketSubresources = []string{"acl", "policy", "cors", "lifecycle", "versions", "uploads", "website",
	"logging", "notification", "replication", "encryption", "object-lock", "ownershipControls",
	"publicAccessBlock", "accelerate", "analytics", "inventory", "metrics", "intelligent-tiering",
	"requestPayment", "policyStatus", "session", "metadataTable", "delete"}

func (s *s3Server) bucketRequest(w http.ResponseWriter, r *http.Request, query url.Values) {
	if r.Method == http.MethodHead {
		w.Header()["x-amz-bucket-region"] = []string{s.region}
		w.WriteHeader(http.StatusOK)
		return
	}
	switch {
	case query.Has("location"):
		location := s.region
		if location == "us-east-1" {
			location = "" // as S3 answers for us-east-1
		}
		s.writeXML(w, http.StatusOK, `<LocationConstraint xmlns="`+s3Namespace+`">`+escapeXML(location)+`</LocationConstraint>`)
	case query.Has("versioning"):
		s.writeXML(w, http.StatusOK, `<VersioningConfiguration xmlns="`+s3Namespace+`"/>`)
	case query.Has("tagging"):
		s.fail(w, r, http.StatusNotFound, "NoSuchTagSet", "The TagSet does not exist", "BucketName", s.bucket.bucket)
	case query.Get("list-type") == "2":
		s.listObjects(w, r, query, true)
	default:
		for _, sub := range bucketSubresources {
			if query.Has(sub) {
				s.fail(w, r, http.StatusNotImplemented, "NotImplemented", "A header or query you provided implies functionality that is not implemented.")
				return
			}
		}
		s.listObjects(w, r, query, false)
	}
}

func (s *s3Server) listBuckets(w http.ResponseWriter) {
	s.writeXML(w, http.StatusOK, `<ListAllMyBucketsResult xmlns="`+s3Namespace+`"><Owner><ID>`+ownerID+
		`</ID><DisplayName>synthetic</DisplayName></Owner><Buckets><Bucket><Name>`+escapeXML(s.bucket.bucket)+
		`</Name><CreationDate>`+s.bucket.lastModifiedXML+`</CreationDate></Bucket></Buckets></ListAllMyBucketsResult>`)
}

// listObjects answers ListObjectsV2 (v2) or ListObjects. Its page starts at the first index
// past the token, StartAfter or Marker (binary searches), and ends at max-keys entries or at
// the end of the keys under the prefix; with a delimiter, the keys a common prefix rolls up
// are skipped with one more search each.
func (s *s3Server) listObjects(w http.ResponseWriter, r *http.Request, query url.Values, v2 bool) {
	vb := s.bucket
	prefix, delimiter := query.Get("prefix"), query.Get("delimiter")
	maxKeys := maxPageKeys
	if text := query.Get("max-keys"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 {
			s.fail(w, r, http.StatusBadRequest, "InvalidArgument", "Provided max-keys not an integer or within integer range",
				"ArgumentName", "max-keys", "ArgumentValue", text)
			return
		}
		maxKeys = min(n, maxPageKeys)
	}
	urlEncoded := false
	if encoding := query.Get("encoding-type"); encoding != "" {
		if encoding != "url" {
			s.fail(w, r, http.StatusBadRequest, "InvalidArgument", "Invalid Encoding Method specified in Request",
				"ArgumentName", "encoding-type", "ArgumentValue", encoding)
			return
		}
		urlEncoded = true
	}
	text := func(value string) string { // a key or prefix as the page writes it
		if urlEncoded {
			value = encodeURL(value)
		}
		return escapeXML(value)
	}
	fetchOwner := !v2 || query.Get("fetch-owner") == "true"

	lo, hi := vb.lowerBound([]byte(prefix)), vb.prefixEnd([]byte(prefix))
	start := lo
	token, hasToken := query.Get("continuation-token"), query.Has("continuation-token")
	startAfter := query.Get("start-after")
	marker := query.Get("marker")
	switch {
	case v2 && hasToken:
		index, ok := decodeToken(token)
		if !ok {
			s.fail(w, r, http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect",
				"ArgumentName", "continuation-token")
			return
		}
		start = max(lo, min(index, hi))
	case v2 && startAfter != "":
		start = max(lo, vb.upperBound(startAfter))
	case !v2 && marker != "":
		start = max(lo, vb.upperBound(marker))
	}

	entriesBuf := buffers.Get().(*[]byte)
	defer buffers.Put(entriesBuf)
	entries := (*entriesBuf)[:0]
	var prefixes []byte
	var keyBuf, trailerBuf []byte
	digest := md5.New()
	var last string // the last key or common prefix written (V1's NextMarker)
	count := 0
	i := start
	for i < hi && count < maxKeys {
		keyBuf = vb.appendKey(keyBuf[:0], i)
		if delimiter != "" {
			if at := strings.Index(string(keyBuf[len(prefix):]), delimiter); at >= 0 {
				common := keyBuf[:len(prefix)+at+len(delimiter)]
				prefixes = append(prefixes, "<CommonPrefixes><Prefix>"...)
				prefixes = append(prefixes, text(string(common))...)
				prefixes = append(prefixes, "</Prefix></CommonPrefixes>"...)
				last = string(common)
				count++
				i = vb.prefixEnd(common)
				continue
			}
		}
		o := vb.object(keyBuf, trailerBuf)
		trailerBuf = o.trailer
		sum := vb.etag(&o, digest)
		entries = append(entries, "<Contents><Key>"...)
		if urlEncoded && !urlSafe(keyBuf) || needsEscape(keyBuf) {
			entries = append(entries, text(string(keyBuf))...)
		} else {
			entries = append(entries, keyBuf...)
		}
		entries = append(entries, "</Key><LastModified>"...)
		entries = append(entries, vb.lastModifiedXML...)
		entries = append(entries, "</LastModified><ETag>&quot;"...)
		entries = hex.AppendEncode(entries, sum[:])
		entries = append(entries, "&quot;</ETag><Size>"...)
		entries = strconv.AppendInt(entries, o.size, 10)
		entries = append(entries, "</Size>"...)
		if fetchOwner {
			entries = append(entries, "<Owner><ID>"+ownerID+"</ID><DisplayName>synthetic</DisplayName></Owner>"...)
		}
		entries = append(entries, "<StorageClass>STANDARD</StorageClass></Contents>"...)
		count++
		i++
		if !v2 && delimiter != "" && (i >= hi || count >= maxKeys) {
			last = string(keyBuf)
		}
	}
	truncated := i < hi

	pageBuf := buffers.Get().(*[]byte)
	defer buffers.Put(pageBuf)
	page := append((*pageBuf)[:0], xmlHeader+`<ListBucketResult xmlns="`+s3Namespace+`"><Name>`...)
	page = append(page, escapeXML(vb.bucket)...)
	page = append(page, "</Name><Prefix>"...)
	page = append(page, text(prefix)...)
	page = append(page, "</Prefix>"...)
	if v2 {
		if hasToken {
			page = append(page, "<ContinuationToken>"+escapeXML(token)+"</ContinuationToken>"...)
		}
		if truncated {
			page = append(page, "<NextContinuationToken>"+encodeToken(i)+"</NextContinuationToken>"...)
		}
		if startAfter != "" {
			page = append(page, "<StartAfter>"+text(startAfter)+"</StartAfter>"...)
		}
		page = append(page, "<KeyCount>"+strconv.Itoa(count)+"</KeyCount>"...)
	} else {
		page = append(page, "<Marker>"+text(marker)+"</Marker>"...)
		if truncated && delimiter != "" { // S3 writes NextMarker only with a delimiter
			page = append(page, "<NextMarker>"+text(last)+"</NextMarker>"...)
		}
	}
	page = append(page, "<MaxKeys>"+strconv.Itoa(maxKeys)+"</MaxKeys>"...)
	if delimiter != "" {
		page = append(page, "<Delimiter>"+text(delimiter)+"</Delimiter>"...)
	}
	if urlEncoded {
		page = append(page, "<EncodingType>url</EncodingType>"...)
	}
	page = append(page, "<IsTruncated>"+strconv.FormatBool(truncated)+"</IsTruncated>"...)
	page = append(page, entries...)
	page = append(page, prefixes...)
	page = append(page, "</ListBucketResult>"...)
	*entriesBuf, *pageBuf = entries, page // keep the grown buffers

	h := w.Header()
	h["Content-Type"] = []string{"application/xml"}
	h["Content-Length"] = []string{strconv.Itoa(len(page))}
	w.WriteHeader(http.StatusOK)
	w.Write(page)
}

func encodeToken(index int64) string {
	return base64.StdEncoding.EncodeToString([]byte(tokenPrefix + strconv.FormatInt(index, 10)))
}

func decodeToken(token string) (int64, bool) {
	raw, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		return 0, false
	}
	digits, ok := cutPrefix(string(raw), tokenPrefix)
	if !ok {
		return 0, false
	}
	index, err := strconv.ParseInt(digits, 10, 64)
	return index, err == nil && index >= 0
}

// Object subresources this server does not have (GetObjectTagging is served).
var objectSubresources = []string{"acl", "attributes", "retention", "legal-hold", "torrent", "uploadId",
	"restore", "select"}

func (s *s3Server) objectRequest(w http.ResponseWriter, r *http.Request, key string, query url.Values) {
	vb := s.bucket
	var scratch [256]byte
	if _, ok := vb.indexOf(key, scratch[:0]); !ok {
		s.fail(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.", "Key", key)
		return
	}
	if version := query.Get("versionId"); version != "" && version != "null" {
		// The bucket was never versioned: its objects' only version is "null".
		s.fail(w, r, http.StatusBadRequest, "InvalidArgument", "Invalid version id specified",
			"ArgumentName", "versionId", "ArgumentValue", version)
		return
	}
	for _, sub := range objectSubresources {
		if query.Has(sub) {
			s.fail(w, r, http.StatusNotImplemented, "NotImplemented", "A header or query you provided implies functionality that is not implemented.")
			return
		}
	}
	if query.Has("tagging") {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return
		}
		s.writeXML(w, http.StatusOK, `<Tagging xmlns="`+s3Namespace+`"><TagSet></TagSet></Tagging>`)
		return
	}

	o := vb.object([]byte(key), nil)
	sum := vb.etag(&o, nil)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	h := w.Header()
	switch status, condition := s.preconditions(r, etag); status {
	case http.StatusPreconditionFailed:
		s.fail(w, r, status, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold",
			"Condition", condition)
		return
	case http.StatusNotModified:
		h["ETag"] = []string{etag}
		h["Last-Modified"] = vb.lastModifiedHTTP
		w.WriteHeader(status)
		return
	}

	first, last := int64(0), o.size-1
	status := http.StatusOK
	rangeHeader := r.Header.Get("Range")
	if part := query.Get("partNumber"); part != "" {
		if rangeHeader != "" {
			s.fail(w, r, http.StatusBadRequest, "InvalidRequest", "Cannot specify both Range header and partNumber query parameter")
			return
		}
		if part != "1" { // an object not uploaded in parts is its own part 1
			s.fail(w, r, http.StatusRequestedRangeNotSatisfiable, "InvalidPartNumber", "The requested partnumber is not satisfiable",
				"PartNumberRequested", part, "ActualPartCount", "1")
			return
		}
		status = http.StatusPartialContent
	} else if rangeHeader != "" {
		a, b, parsed, satisfiable := parseRange(rangeHeader, o.size)
		if parsed && !satisfiable {
			h["Content-Range"] = []string{"bytes */" + strconv.FormatInt(o.size, 10)}
			s.fail(w, r, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable",
				"RangeRequested", rangeHeader, "ActualObjectSize", strconv.FormatInt(o.size, 10))
			return
		}
		if parsed {
			first, last, status = a, b, http.StatusPartialContent
		}
	}
	length := last - first + 1

	h["ETag"] = []string{etag}
	h["Last-Modified"] = vb.lastModifiedHTTP
	h["Accept-Ranges"] = []string{"bytes"}
	h["Content-Type"] = []string{"text/plain"}
	h["Content-Length"] = []string{strconv.FormatInt(length, 10)}
	if status == http.StatusPartialContent {
		h["Content-Range"] = []string{fmt.Sprintf("bytes %d-%d/%d", first, last, o.size)}
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead || length == 0 {
		return
	}
	bufp := buffers.Get().(*[]byte)
	defer buffers.Put(bufp)
	buf := (*bufp)[:cap(*bufp)]
	for off := first; off <= last; {
		n := min(int64(len(buf)), last-off+1)
		vb.fill(&o, buf[:n], off)
		if _, err := w.Write(buf[:n]); err != nil {
			return // the client went away
		}
		off += n
	}
}

// preconditions evaluates the conditional headers in RFC 9110's order, as S3 does: If-Match
// (else If-Unmodified-Since) fails with 412; If-None-Match (else If-Modified-Since) answers 304.
// It returns 0 when the request goes ahead, and the header that failed.
func (s *s3Server) preconditions(r *http.Request, etag string) (int, string) {
	modified := s.bucket.lastModified
	if match := r.Header.Get("If-Match"); match != "" {
		if !etagListed(match, etag) {
			return http.StatusPreconditionFailed, "If-Match"
		}
	} else if since := r.Header.Get("If-Unmodified-Since"); since != "" {
		if t, err := http.ParseTime(since); err == nil && modified.After(t) {
			return http.StatusPreconditionFailed, "If-Unmodified-Since"
		}
	}
	if noneMatch := r.Header.Get("If-None-Match"); noneMatch != "" {
		if etagListed(noneMatch, etag) {
			return http.StatusNotModified, ""
		}
	} else if since := r.Header.Get("If-Modified-Since"); since != "" {
		if t, err := http.ParseTime(since); err == nil && !modified.After(t) {
			return http.StatusNotModified, ""
		}
	}
	return 0, ""
}

// etagListed says whether a comma-separated If-Match / If-None-Match list names etag or "*";
// quotes are optional, as S3 accepts an unquoted ETag too.
func etagListed(list, etag string) bool {
	bare := strings.Trim(etag, `"`)
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimPrefix(strings.TrimSpace(item), "W/")
		if item == "*" || strings.Trim(item, `"`) == bare {
			return true
		}
	}
	return false
}

// parseRange reads one "bytes=a-b", "bytes=a-" or "bytes=-n" range into [first, last]. A
// header that is not one such range is not parsed (S3 then serves the whole object); a range
// that starts past the end, or a suffix of 0 bytes, is not satisfiable (416).
func parseRange(header string, size int64) (first, last int64, parsed, satisfiable bool) {
	spec, ok := cutPrefix(strings.TrimSpace(header), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false, false
	}
	from, to, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, false, false
	}
	if from == "" { // the last n bytes
		n, err := strconv.ParseInt(to, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false, false
		}
		if n == 0 || size == 0 {
			return 0, 0, true, false
		}
		return max(0, size-n), size - 1, true, true
	}
	a, err := strconv.ParseInt(from, 10, 64)
	if err != nil || a < 0 {
		return 0, 0, false, false
	}
	b := size - 1
	if to != "" {
		if b, err = strconv.ParseInt(to, 10, 64); err != nil || b < a {
			return 0, 0, false, false
		}
	}
	if a >= size {
		return 0, 0, true, false
	}
	return a, min(b, size-1), true, true
}

func (s *s3Server) writeXML(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/xml"}
	h["Content-Length"] = []string{strconv.Itoa(len(xmlHeader) + len(body))}
	w.WriteHeader(status)
	w.Write([]byte(xmlHeader + body))
}

// fail answers with S3's error document (extra: element name, value pairs); a HEAD's answer
// has the status only, as S3's has.
func (s *s3Server) fail(w http.ResponseWriter, r *http.Request, status int, code, message string, extra ...string) {
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	var b strings.Builder
	b.WriteString("<Error><Code>" + code + "</Code><Message>" + escapeXML(message) + "</Message>")
	for i := 0; i+1 < len(extra); i += 2 {
		b.WriteString("<" + extra[i] + ">" + escapeXML(extra[i+1]) + "</" + extra[i] + ">")
	}
	b.WriteString("<RequestId>" + w.Header()["x-amz-request-id"][0] + "</RequestId><HostId>synthetic-s3</HostId></Error>")
	s.writeXML(w, status, b.String())
}

func needsEscape(b []byte) bool {
	for _, c := range b {
		if c == '&' || c == '<' || c == '>' || c == '"' || c == '\'' || c < 0x20 {
			return true
		}
	}
	return false
}

// escapeXML escapes text for an element, as S3 writes it (quotes as &quot;).
func escapeXML(s string) string {
	if !needsEscape([]byte(s)) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, "&#x%X;", c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

func urlSafeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~/", c) >= 0
}

// urlSafe says whether encodeURL leaves b as it is (every generated key, unless the prefix
// needs encoding): a listing then writes the key without encoding it.
func urlSafe(b []byte) bool {
	for _, c := range b {
		if !urlSafeByte(c) {
			return false
		}
	}
	return true
}

// encodeURL is encoding-type=url's form of a key: every byte but the unreserved ones and "/"
// percent-encoded (clients decode it with unquote_plus, so a "+" must be encoded too).
func encodeURL(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if urlSafeByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}
