package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// The sizes and the seed of the bundled input.
const (
	seed       = 20260918
	payouts    = 10_000
	pageViews  = 50_000
	statements = 500 // statements of `lines` lines each
	lines      = 20
)

func main() {
	out := flag.String("out", "testdata", "directory to write the .jsonl.gz files into")
	flag.Parse()
	if err := write(*out, generate()); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// generate returns each file's name and its uncompressed content.
func generate() map[string][]byte {
	r := rand.New(rand.NewPCG(seed, seed>>1))
	return map[string][]byte{
		"payouts.jsonl.gz":    genPayouts(r),
		"page-views.jsonl.gz": genPageViews(r),
		"statements.jsonl.gz": genStatements(r),
	}
}

// write gzips each file into dir. The gzip header carries no name and no time, so the bytes depend
// only on the content (and on compress/flate, which gen_test.go does not rely on).
func write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return err
		}
		if _, err := zw.Write(files[name]); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// number matches the first numeric field of any of the three record types.
var number = regexp.MustCompile(`"(amount_cents|ms|line)":(\d+)`)

// malformed returns a line that does not decode into its record type, built from a good line: cut
// short, its first number sent as a string, or something that is not JSON at all.
func malformed(r *rand.Rand, good string) string {
	switch r.IntN(3) {
	case 0:
		return good[:len(good)/2]
	case 1:
		loc := number.FindStringSubmatchIndex(good)
		return good[:loc[0]] + number.ReplaceAllString(good[loc[0]:loc[1]], `"$1":"$2"`) + good[loc[1]:]
	default:
		return "<html><body>502 Bad Gateway</body></html>"
	}
}

// jsonl joins lines, inserting a malformed line after a good one with probability 1/every.
func jsonl(r *rand.Rand, good []string, every int) []byte {
	var b bytes.Buffer
	for _, l := range good {
		b.WriteString(l)
		b.WriteByte('\n')
		if r.IntN(every) == 0 {
			b.WriteString(malformed(r, l))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func genPayouts(r *rand.Rand) []byte {
	currencies := []string{"EUR", "USD", "GBP"}
	good := make([]string, payouts)
	for i := range good {
		cents := 0
		if r.IntN(50) != 0 { // 2% are for zero cents
			cents = 100 + r.IntN(500_000)
		}
		good[i] = fmt.Sprintf(`{"id":"po-%05d","account":"acct-%04d","amount_cents":%d,"currency":%q}`,
			i+1, r.IntN(2_000), cents, currencies[r.IntN(len(currencies))])
	}
	return jsonl(r, good, 400)
}

func genPageViews(r *rand.Rand) []byte {
	pages := []string{"/", "/pricing", "/docs", "/docs/tracked", "/docs/retries", "/blog", "/signup",
		"/login", "/account", "/account/payouts", "/status", "/careers"}
	good := make([]string, pageViews)
	for i := range good {
		good[i] = fmt.Sprintf(`{"id":"pv-%06d","user":"u-%04d","page":%q,"ms":%d}`,
			i+1, r.IntN(5_000), pages[r.IntN(len(pages))], 50+r.IntN(30_000))
	}
	return jsonl(r, good, 1_000)
}

func genStatements(r *rand.Rand) []byte {
	good := make([]string, 0, statements*lines)
	for s := range statements {
		for l := range lines {
			if r.IntN(33) == 0 { // about 3% are empty lines
				good = append(good, fmt.Sprintf(`{"statement":"st-%04d","line":%d}`, s+1, l+1))
				continue
			}
			good = append(good, fmt.Sprintf(`{"statement":"st-%04d","line":%d,"payout":"po-%05d","amount_cents":%d}`,
				s+1, l+1, 1+r.IntN(payouts), 100+r.IntN(500_000)))
		}
	}
	return jsonl(r, good, 500)
}
