package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The committed input is what the generator makes: the test compares the decompressed content of
// every file in ../../testdata with generate(), so a change to either shows up here. Compressed
// bytes are not compared: they depend on compress/flate, which may change between Go releases.
func TestCommittedInputIsWhatTheGeneratorMakes(t *testing.T) {
	want := generate()
	dir := filepath.Join("..", "..", "testdata")
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	if got := slices.Sorted(maps.Keys(want)); !slices.Equal(names, got) {
		t.Fatalf("testdata holds %v, the generator makes %v", names, got)
	}
	for name, content := range want {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, content) {
			t.Errorf("%s differs from what the generator makes: run go generate ./examples/payouts", name)
		}
	}
}
