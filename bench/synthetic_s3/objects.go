package main

// The virtual bucket: N objects whose keys, sizes, bytes and ETags are computed from the key
// and the seed, so a bench can list and read millions of objects that were never written.
//
// Keys are log-like and ordered by index (both numbers zero-padded), so a key's index comes
// from parsing it and a listing position from a binary search over the index:
//
//	{prefix}host-0007/app-000071234.log     host = index / per-host
//
// An object's bytes are a slice of one shared, cyclic pool of log lines (about 1 MiB, made
// from the seed) that begins at one of a fixed set of line starts, followed by one trailer line
// that names the key (so no two objects are equal):
//
//	<pool text from start, partLen bytes>\nobject=KEY\n
//
// The key goes last, not first, for the ETag's sake: S3's ETag of such an object is the MD5 of
// its bytes, and MD5 runs at ~260 MB/s on the bench machine, so hashing 7 KB per object would
// cost a GET ~27 us and a LIST page of 1,000 ~27 ms. With the pool text first, every object
// that begins at the same start shares the MD5 state of its first 64*k bytes; those states are
// computed once (statesBudget of them, ~0.1 s at start), so an ETag costs the hash of under
// 64 bytes of pool text plus the short trailer, 1-3 MD5 blocks: ~0.5 us (BenchmarkETag).

import (
	"bytes"
	"crypto/md5"
	"encoding"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"time"
)

const (
	poolTarget   = 1 << 20 // bytes of log text in the pool (whole lines, so a little less)
	statesBudget = 1 << 20 // precomputed MD5 states (16 bytes each: 16 MiB at most)
	md5Block     = 64
)

type config struct {
	bucket       string
	prefix       string
	objects      int64
	perHost      int64
	sizeMin      int64
	sizeMax      int64
	seed         uint64
	lastModified time.Time
}

type virtualBucket struct {
	config
	hostWidth, indexWidth int

	lastModifiedXML  string   // as listings write it: 2026-11-02T00:00:00.000Z
	lastModifiedHTTP []string // as the Last-Modified header writes it (shared, never changed)

	pool   []byte  // log lines, read cyclically (an object may be longer than the pool)
	starts []int64 // pool offsets (line starts) an object's text may begin at
	blocks int64   // MD5 states kept per start: after 0, 64, ..., 64*blocks bytes
	states []byte  // 16 bytes per state: start-major, then block
	// A marshaled MD5 state at a block boundary (crypto/md5's encoding.BinaryMarshaler form);
	// a kept state is restored by writing its 16 bytes and its length into a copy.
	stateTemplate []byte
}

// object is what a request needs of one key; trailer is the key's own last line, cut to the
// size when the object is shorter than it.
type object struct {
	size    int64
	start   int   // index into starts
	partLen int64 // bytes of pool text before the trailer
	trailer []byte
}

func newVirtualBucket(c config) (*virtualBucket, error) {
	if c.objects < 0 || c.perHost < 1 || c.sizeMin < 0 || c.sizeMax < c.sizeMin {
		return nil, fmt.Errorf("need objects >= 0, per-host >= 1, 0 <= size-min <= size-max")
	}
	b := &virtualBucket{config: c}
	b.hostWidth = max(4, len(strconv.FormatInt(max(c.objects-1, 0)/c.perHost, 10)))
	b.indexWidth = max(9, len(strconv.FormatInt(max(c.objects-1, 0), 10)))
	lm := c.lastModified.UTC()
	b.lastModifiedXML = lm.Format("2006-01-02T15:04:05.000Z")
	b.lastModifiedHTTP = []string{lm.Format(timeFormatGMT)}
	day := lm.Add(-time.Nanosecond) // the log lines are of the day before the objects were written
	lineStarts := b.makePool(day)

	// As many starts as the budget holds states for objects up to size-max, at least one.
	perStart := (c.sizeMax+md5Block-1)/md5Block + 1
	count := max(1, min(int64(len(lineStarts)), statesBudget/perStart))
	b.blocks = min(perStart, statesBudget) - 1
	b.starts = make([]int64, count)
	for j := range b.starts { // spread over the pool, so neighbouring objects rarely share text
		b.starts[j] = lineStarts[int64(j)*int64(len(lineStarts))/count]
	}
	b.precomputeStates()
	return b, b.selfCheck()
}

var (
	logLevels = []string{"INFO", "INFO", "INFO", "INFO", "INFO", "INFO", "INFO", "INFO", "WARN", "ERROR"}
	logPaths  = []string{"/api/v1/orders", "/api/v1/items", "/api/v1/users/me", "/healthz", "/api/v2/search"}
	logStatus = []int{200, 200, 200, 201, 404, 500}
)

// makePool writes the pool in the shape of devtools/sample_data.log_lines (the lines the
// MinIO benches seed), hours rising through the pool; it returns the offsets of its lines.
func (b *virtualBucket) makePool(day time.Time) []int64 {
	rng := rand.New(rand.NewPCG(b.seed, 0x73796e7468657469)) // "syntheti"
	date := day.Format("2006-01-02")
	pool := make([]byte, 0, poolTarget)
	var starts []int64
	var line []byte
	for {
		hour := len(pool) * 24 / poolTarget
		line = fmt.Appendf(line[:0], "%sT%02d:%02d:%02d.%03dZ %s req=%012x method=GET path=%s status=%d latency_ms=%d user=u%d\n",
			date, hour, rng.IntN(60), rng.IntN(60), rng.IntN(1000), logLevels[rng.IntN(len(logLevels))],
			rng.Uint64()>>16, logPaths[rng.IntN(len(logPaths))], logStatus[rng.IntN(len(logStatus))],
			1+rng.IntN(899), rng.IntN(5000))
		if len(pool)+len(line) > poolTarget {
			break
		}
		starts = append(starts, int64(len(pool)))
		pool = append(pool, line...)
	}
	b.pool = pool
	return starts
}

// precomputeStates hashes each start's text block by block and keeps the state after each
// block: about 64 MB of MD5 for 2-12 KB objects, spread over the CPUs (~0.1 s).
func (b *virtualBucket) precomputeStates() {
	per := b.blocks + 1
	b.states = make([]byte, int64(len(b.starts))*per*md5.Size)
	template, _ := md5.New().(encoding.BinaryAppender).AppendBinary(nil)
	b.stateTemplate = template
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scratch := make([]byte, 0, len(template))
			for j := w; j < len(b.starts); j += workers {
				d := md5.New()
				for k := int64(0); k < per; k++ {
					if k > 0 {
						b.hashPool(d, b.starts[j]+(k-1)*md5Block, md5Block)
					}
					scratch, _ = d.(encoding.BinaryAppender).AppendBinary(scratch[:0])
					copy(b.states[(int64(j)*per+k)*md5.Size:], scratch[4:4+md5.Size])
				}
			}
		}()
	}
	wg.Wait()
}

// hashPool writes n bytes of the cyclic pool from offset pos into d.
func (b *virtualBucket) hashPool(d hash.Hash, pos, n int64) {
	p := int64(len(b.pool))
	for n > 0 {
		at := pos % p
		chunk := min(n, p-at)
		d.Write(b.pool[at : at+chunk])
		pos += chunk
		n -= chunk
	}
}

// copyPool fills dst from the cyclic pool at offset pos.
func (b *virtualBucket) copyPool(dst []byte, pos int64) {
	p := int64(len(b.pool))
	for len(dst) > 0 {
		n := copy(dst, b.pool[pos%p:])
		dst = dst[n:]
		pos += int64(n)
	}
}

// keyHash is FNV-1a over the seed and the key with splitmix64's finalizer: the same numbers
// on every machine and run (hash/maphash is seeded per process).
func keyHash[K string | []byte](seed uint64, key K) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < 8; i++ {
		h = (h ^ (seed >> (8 * i) & 0xff)) * 1099511628211
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	return mix64(h)
}

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// appendKey appends the key of object i: prefix, host folder, file name, zero-padded so that
// keys sort as their indexes do.
func (b *virtualBucket) appendKey(dst []byte, i int64) []byte {
	dst = append(dst, b.prefix...)
	dst = append(dst, "host-"...)
	dst = appendPadded(dst, i/b.perHost, b.hostWidth)
	dst = append(dst, "/app-"...)
	dst = appendPadded(dst, i, b.indexWidth)
	return append(dst, ".log"...)
}

func appendPadded(dst []byte, n int64, width int) []byte {
	var digits [20]byte
	s := strconv.AppendInt(digits[:0], n, 10)
	for pad := width - len(s); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// indexOf is the index of key, or false when the bucket has no such key. It parses the key
// and checks that it is exactly what appendKey writes for that index.
func (b *virtualBucket) indexOf(key string, scratch []byte) (int64, bool) {
	rest, ok := cutPrefix(key, b.prefix)
	if !ok {
		return 0, false
	}
	rest, ok = cutPrefix(rest, "host-")
	if !ok || len(rest) < b.hostWidth {
		return 0, false
	}
	rest, ok = cutPrefix(rest[b.hostWidth:], "/app-")
	if !ok || len(rest) != b.indexWidth+len(".log") {
		return 0, false
	}
	i, err := strconv.ParseInt(rest[:b.indexWidth], 10, 64)
	if err != nil || i < 0 || i >= b.objects {
		return 0, false
	}
	return i, string(b.appendKey(scratch[:0], i)) == key
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return s, false
	}
	return s[len(prefix):], true
}

// lowerBound is the first index whose key is >= s (objects when none is): keys grow with
// their index, so a binary search of ~log2(N) formatted keys.
func (b *virtualBucket) lowerBound(s []byte) int64 {
	var scratch [256]byte
	lo, hi := int64(0), b.objects
	for lo < hi {
		mid := lo + (hi-lo)/2
		if bytes.Compare(b.appendKey(scratch[:0], mid), s) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// upperBound is the first index whose key is > s.
func (b *virtualBucket) upperBound(s string) int64 {
	return b.lowerBound(append([]byte(s), 0))
}

// prefixEnd is the first index past every key that begins with prefix: the end of the keys
// under a listing's prefix, or of those a common prefix rolls up.
func (b *virtualBucket) prefixEnd(prefix []byte) int64 {
	successor := bytes.Clone(prefix)
	for len(successor) > 0 && successor[len(successor)-1] == 0xff {
		successor = successor[:len(successor)-1]
	}
	if len(successor) == 0 {
		return b.objects
	}
	successor[len(successor)-1]++
	return b.lowerBound(successor)
}

// object computes what a request needs of a key that exists; its trailer is appended to
// scratch (a listing reuses one for every entry).
func (b *virtualBucket) object(key []byte, scratch []byte) object {
	h := keyHash(b.seed, key)
	o := object{
		size:  b.sizeMin + int64(h%uint64(b.sizeMax-b.sizeMin+1)),
		start: int(mix64(h^0x5bd1e995) % uint64(len(b.starts))),
	}
	trailer := append(scratch[:0], "\nobject="...)
	trailer = append(trailer, key...)
	trailer = append(trailer, '\n')
	if int64(len(trailer)) > o.size {
		trailer = trailer[:o.size]
	}
	o.trailer = trailer
	o.partLen = o.size - int64(len(trailer))
	return o
}

// etag is the MD5 of the object's bytes, from the kept state nearest below its pool text's
// end. d is a digest to reuse (restoring a state resets it), or nil.
func (b *virtualBucket) etag(o *object, d hash.Hash) [md5.Size]byte {
	k := min(o.partLen/md5Block, b.blocks)
	var state [128]byte
	marshaled := state[:len(b.stateTemplate)]
	copy(marshaled, b.stateTemplate)
	at := (int64(o.start)*(b.blocks+1) + k) * md5.Size
	copy(marshaled[4:4+md5.Size], b.states[at:at+md5.Size])
	binary.BigEndian.PutUint64(marshaled[len(marshaled)-8:], uint64(k*md5Block))
	if d == nil {
		d = md5.New()
	}
	if err := d.(encoding.BinaryUnmarshaler).UnmarshalBinary(marshaled); err != nil {
		panic(err) // selfCheck ran this at start
	}
	b.hashPool(d, b.starts[o.start]+k*md5Block, o.partLen-k*md5Block)
	d.Write(o.trailer)
	var sum [md5.Size]byte
	d.Sum(sum[:0])
	return sum
}

// fill writes the object's bytes [off, off+len(dst)) into dst.
func (b *virtualBucket) fill(o *object, dst []byte, off int64) {
	if off < o.partLen {
		n := min(int64(len(dst)), o.partLen-off)
		b.copyPool(dst[:n], b.starts[o.start]+off)
		dst, off = dst[n:], off+n
	}
	if len(dst) > 0 {
		copy(dst, o.trailer[off-o.partLen:])
	}
}

// selfCheck compares the fast ETag with the MD5 of the whole bytes for objects spread over
// the bucket, and for the sizes at the edges of the kept states: a crypto/md5 whose marshaled
// form changed would fail here, at start, rather than serve wrong ETags.
func (b *virtualBucket) selfCheck() error {
	var scratch []byte
	check := func(key []byte, o object) error {
		body := make([]byte, o.size)
		b.fill(&o, body, 0)
		if want, got := md5.Sum(body), b.etag(&o, nil); want != got {
			return fmt.Errorf("self-check: ETag of %s (size %d) is %x, its bytes' MD5 %x", key, o.size, got, want)
		}
		return nil
	}
	for n := int64(0); n < 64 && n < b.objects; n++ {
		key := b.appendKey(scratch[:0], n*b.objects/64)
		if err := check(key, b.object(key, nil)); err != nil {
			return err
		}
	}
	key := []byte(b.prefix + "self-check")
	for _, size := range []int64{0, 1, 63, 64, 65, 200, 4096, 64*b.blocks + 100, 64*(b.blocks+3) + 7} {
		o := b.object(key, nil)
		o.size, o.partLen = size, max(0, size-int64(len(o.trailer)))
		o.trailer = o.trailer[:size-o.partLen]
		if err := check(key, o); err != nil {
			return err
		}
	}
	return nil
}
