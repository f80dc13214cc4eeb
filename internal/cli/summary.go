package cli

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/proctor-dev/proctor/runner/results"
)

// printSummary prints one row per model and dataset: counts, every metric,
// latency percentiles and tokens.
func printSummary(w io.Writer, ss []results.Summary, metrics []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"MODEL", "DATASET", "DONE", "ERRORS"}
	for _, m := range metrics {
		head = append(head, strings.ToUpper(m))
	}
	head = append(head, "P50", "P95", "TOKENS IN/OUT")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, s := range ss {
		row := []string{s.Model, s.Dataset, fmt.Sprintf("%d/%d", s.Completed, s.Total), fmt.Sprint(s.Errored)}
		for _, m := range metrics {
			if v, ok := s.Metrics[m]; ok {
				row = append(row, fmt.Sprintf("%.4f", v))
			} else {
				row = append(row, "-")
			}
		}
		row = append(row, fmt.Sprintf("%dms", s.LatencyMillis.P50), fmt.Sprintf("%dms", s.LatencyMillis.P95),
			fmt.Sprintf("%d/%d", s.Tokens.Input, s.Tokens.Output))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// errorCount is how many records of a model on a dataset failed with one error.
type errorCount struct {
	Pair  string // model/dataset
	Error string
	Count int
}

// maxDistinctErrors bounds the errors counted apart: data errors name their
// line, so a large file of bad records would otherwise count each one.
const maxDistinctErrors = 10000

// topErrors reads results.jsonl and returns its n most common errors, most
// common first (ties by pair, then error text).
func topErrors(resultsFile string, n int) ([]errorCount, error) {
	f, err := os.Open(resultsFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct{ pair, err string }
	counts := map[key]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r struct {
			Model, Dataset, Error string
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Error == "" {
			continue
		}
		k := key{r.Model + "/" + r.Dataset, r.Error}
		if _, ok := counts[k]; ok || len(counts) < maxDistinctErrors {
			counts[k]++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]errorCount, 0, len(counts))
	for k, c := range counts {
		out = append(out, errorCount{Pair: k.pair, Error: k.err, Count: c})
	}
	slices.SortFunc(out, func(a, b errorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Pair, b.Pair), cmp.Compare(a.Error, b.Error))
	})
	return out[:min(n, len(out))], nil
}

// maxErrorText is how much of an error the summary shows; results.jsonl has it whole.
const maxErrorText = 300

// printErrors prints the most common errors under the summary table, so a run
// that failed says why without a look into results.jsonl.
func printErrors(w io.Writer, errs []errorCount) {
	if len(errs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nMost common errors:")
	for _, e := range errs {
		text := strings.Join(strings.Fields(e.Error), " ")
		if r := []rune(text); len(r) > maxErrorText {
			text = string(r[:maxErrorText]) + "…"
		}
		fmt.Fprintf(w, "  %d× %s: %s\n", e.Count, e.Pair, text)
	}
}
