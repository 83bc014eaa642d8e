// Command goprocfs times prometheus/procfs parsing the same mountstats and mountinfo
// files that mountwarden's Python parsers read, so both are measured in one run.
//
// Usage: goprocfs -root DIR -pid 1 -seconds 2
// DIR/<pid>/mountstats and DIR/<pid>/mountinfo are parsed repeatedly; one JSON
// object with lines per second for each file goes to stdout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

type result struct {
	Lines          int     `json:"lines"`
	Iterations     int     `json:"iterations"`
	Seconds        float64 `json:"seconds"`
	LinesPerSecond float64 `json:"lines_per_second"`
	Items          int     `json:"items"`
}

func countLines(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return strings.Count(string(data), "\n")
}

// measure repeats parse until budget has passed and reports its throughput in lines.
func measure(lines int, budget time.Duration, parse func() (int, error)) result {
	var items, iterations int
	start := time.Now()
	for time.Since(start) < budget {
		n, err := parse()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		items = n
		iterations++
	}
	elapsed := time.Since(start).Seconds()
	return result{lines, iterations, elapsed, float64(lines*iterations) / elapsed, items}
}

func main() {
	root := flag.String("root", "", "a directory laid out like /proc")
	pid := flag.Int("pid", 1, "the process directory to read")
	seconds := flag.Float64("seconds", 2, "time spent on each file")
	flag.Parse()

	fs, err := procfs.NewFS(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	proc, err := fs.Proc(*pid)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	budget := time.Duration(*seconds * float64(time.Second))
	dir := filepath.Join(*root, fmt.Sprint(*pid))
	out := map[string]result{
		"mountstats": measure(countLines(filepath.Join(dir, "mountstats")), budget, func() (int, error) {
			mounts, err := proc.MountStats()
			return len(mounts), err
		}),
		"mountinfo": measure(countLines(filepath.Join(dir, "mountinfo")), budget, func() (int, error) {
			mounts, err := proc.MountInfo()
			return len(mounts), err
		}),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
