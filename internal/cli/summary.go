package cli

import (
	"fmt"
	"io"
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
