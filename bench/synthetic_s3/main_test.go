package main

// The virtual bucket's invariants, which the S3 answers rest on, and the cost of a request
// without the network: `go test -bench . -benchmem` (tests/test_synthetic_s3.py runs the tests).

import (
	"bytes"
	"crypto/md5"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func testBucket(t testing.TB, objects, sizeMin, sizeMax int64) *virtualBucket {
	t.Helper()
	vb, err := newVirtualBucket(config{bucket: "synthetic", prefix: "day/", objects: objects, perHost: 1000,
		sizeMin: sizeMin, sizeMax: sizeMax, seed: 3, lastModified: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	return vb
}

func body(vb *virtualBucket, key []byte) ([]byte, object) {
	o := vb.object(key, nil)
	b := make([]byte, o.size)
	vb.fill(&o, b, 0)
	return b, o
}

// Keys sort as their indexes, parse back to them, and the binary searches find them.
func TestKeysSortAndParse(t *testing.T) {
	vb := testBucket(t, 123_457, 2000, 12000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		i, j := rng.Int64N(vb.objects), rng.Int64N(vb.objects)
		ki, kj := string(vb.appendKey(nil, i)), string(vb.appendKey(nil, j))
		if (i < j) != (ki < kj) {
			t.Fatalf("key order: %d %q, %d %q", i, ki, j, kj)
		}
		if got, ok := vb.indexOf(ki, nil); !ok || got != i {
			t.Fatalf("indexOf(%q) = %d, %v", ki, got, ok)
		}
		if got := vb.lowerBound([]byte(ki)); got != i {
			t.Fatalf("lowerBound(%q) = %d", ki, got)
		}
		if got := vb.upperBound(ki); got != i+1 {
			t.Fatalf("upperBound(%q) = %d", ki, got)
		}
	}
	for _, missing := range []string{"day/host-0000/app-000001000.log", "day/host-0123/app-123457.log",
		"day/host-0123/app-000123457.log", "day/host-0000/app-00000000x.log", "day/x", "other"} {
		if _, ok := vb.indexOf(missing, nil); ok {
			t.Errorf("indexOf(%q) found it", missing)
		}
	}
	if got := vb.prefixEnd([]byte("day/host-0007/")); got != 8000 {
		t.Errorf("prefixEnd(day/host-0007/) = %d", got)
	}
}

// The ETag is the MD5 of the bytes, and a range is the slice of the whole, for small objects
// and for ones longer than the pool and than the kept MD5 states.
func TestETagAndRanges(t *testing.T) {
	for _, sizes := range [][2]int64{{0, 300}, {2000, 12000}, {3 << 20, 3<<20 + 5000}} {
		vb := testBucket(t, 5000, sizes[0], sizes[1])
		rng := rand.New(rand.NewPCG(uint64(sizes[0]), 9))
		for n := range 40 {
			key := vb.appendKey(nil, rng.Int64N(vb.objects))
			whole, o := body(vb, key)
			if got, want := vb.etag(&o, nil), md5.Sum(whole); got != want {
				t.Fatalf("sizes %v, %s: ETag %x, MD5 %x", sizes, key, got, want)
			}
			if n == 0 && o.size > 100 && !bytes.Contains(whole, key) {
				t.Fatalf("%s: the key is not in its bytes", key)
			}
			for range 5 {
				if o.size == 0 {
					break
				}
				a := rng.Int64N(o.size)
				b := a + rng.Int64N(o.size-a)
				part := make([]byte, b-a+1)
				vb.fill(&o, part, a)
				if !bytes.Equal(part, whole[a:b+1]) {
					t.Fatalf("sizes %v, %s: bytes %d-%d differ from the whole's", sizes, key, a, b)
				}
			}
		}
	}
}

func TestParseRange(t *testing.T) {
	for header, want := range map[string][4]int64{ // first, last, parsed, satisfiable
		"bytes=0-99": {0, 99, 1, 1}, "bytes=990-": {990, 999, 1, 1}, "bytes=-10": {990, 999, 1, 1},
		"bytes=5-5000": {5, 999, 1, 1}, "bytes=-5000": {0, 999, 1, 1}, "bytes=1000-": {0, 0, 1, 0},
		"bytes=-0": {0, 0, 1, 0}, "bytes=9-3": {0, 0, 0, 0}, "bytes=0-1,4-5": {0, 0, 0, 0}, "lines=1-2": {0, 0, 0, 0},
	} {
		a, b, parsed, ok := parseRange(header, 1000)
		got := [4]int64{a, b, boolInt(parsed), boolInt(ok)}
		if got != want {
			t.Errorf("parseRange(%q) = %v, want %v", header, got, want)
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func BenchmarkETag(b *testing.B) {
	vb := testBucket(b, 1_000_000, 2000, 12000)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = vb.appendKey(nil, int64(i)*977)
	}
	var trailer []byte
	d := md5.New()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := vb.object(keys[i%len(keys)], trailer)
		vb.etag(&o, d)
		trailer = o.trailer
	}
}

func BenchmarkGetObject(b *testing.B) {
	vb := testBucket(b, 1_000_000, 2000, 12000)
	server := &s3Server{bucket: vb, region: "us-east-1"}
	requests := make([]*http.Request, 1024)
	for i := range requests {
		requests[i] = httptest.NewRequest("GET", "/synthetic/"+string(vb.appendKey(nil, int64(i)*977)), nil)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		server.ServeHTTP(w, requests[i%len(requests)])
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

func BenchmarkListPage(b *testing.B) {
	vb := testBucket(b, 1_000_000, 2000, 12000)
	server := &s3Server{bucket: vb, region: "us-east-1"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := string(vb.appendKey(nil, int64(i)*7919%vb.objects))
		w := httptest.NewRecorder()
		server.ServeHTTP(w, httptest.NewRequest("GET", "/synthetic?list-type=2&prefix=day/&start-after="+start+
			"&encoding-type=url&max-keys="+strconv.Itoa(maxPageKeys), nil))
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
