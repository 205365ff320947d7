package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"
)

// testdata is the bundled input, written by internal/gen and embedded so that the demo runs from
// any directory.
//
//go:embed testdata/*.jsonl.gz
var testdata embed.FS

// An input is one bundled file and the topic its lines go to, one record per line.
type input struct {
	topic string
	file  string // in testdata
}

// inputs are the bundled files, in the order the demo produces them.
var inputs = []input{
	{"payouts", "payouts.jsonl.gz"},
	{"page-views", "page-views.jsonl.gz"},
	{"statements", "statements.jsonl.gz"},
}

// readLines returns the lines of a bundled file, without their newlines.
func readLines(file string) ([][]byte, error) {
	f, err := testdata.Open("testdata/" + file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	return lines, sc.Err()
}

// records returns one record per line of in's file. Each is keyed by what it is about (the payout's
// id, the viewer, the statement), so a key's records share a partition; a line that names nothing
// (it does not decode) is keyed by its place in the file.
func (in input) records() ([]*kgo.Record, error) {
	lines, err := readLines(in.file)
	if err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, len(lines))
	for i, l := range lines {
		var k struct {
			ID        string `json:"id"`
			User      string `json:"user"`
			Statement string `json:"statement"`
		}
		key := fmt.Sprintf("%s:%d", in.file, i+1)
		if json.Unmarshal(l, &k) == nil {
			switch {
			case in.topic == "page-views" && k.User != "":
				key = k.User
			case in.topic == "statements" && k.Statement != "":
				key = k.Statement
			case in.topic == "payouts" && k.ID != "":
				key = k.ID
			}
		}
		recs[i] = &kgo.Record{Topic: in.topic, Key: []byte(key), Value: l}
	}
	return recs, nil
}
