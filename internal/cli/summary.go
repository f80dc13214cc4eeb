package cli

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

// printSummary prints one row per model and dataset: counts, every metric,
// latency percentiles and tokens.
func printSummary(w io.Writer, ss []results.Summary, metrics []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"MODEL", "DATASET", "DONE", "ERRORS"}
	for _, m := range metrics {
		head = append(head, terminalSafe(strings.ToUpper(m)))
	}
	head = append(head, "P50", "P95", "TOKENS IN/OUT", "COST")
	judged := slices.ContainsFunc(ss, func(s results.Summary) bool { return s.Cost.Judged })
	if judged {
		head = append(head, "JUDGE COST")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, s := range ss {
		// A tab or escape sequence in a name (summary.json from a cluster is
		// data) would break the table or drive the terminal.
		row := []string{terminalSafe(s.Model), terminalSafe(s.Dataset), fmt.Sprintf("%d/%d", s.Completed, s.Total), fmt.Sprint(s.Errored)}
		for _, m := range metrics {
			if v, ok := s.Metrics[m]; ok {
				cell := fmt.Sprintf("%.4f", v)
				if iv, ok := s.Intervals[m]; ok {
					// The 95% interval: how far the score may be from the
					// model's true one on this dataset.
					cell += fmt.Sprintf(" [%.4f, %.4f]", iv.Lo, iv.Hi)
				}
				row = append(row, cell)
			} else {
				row = append(row, "-")
			}
		}
		row = append(row, fmt.Sprintf("%dms", s.LatencyMillis.P50), fmt.Sprintf("%dms", s.LatencyMillis.P95),
			fmt.Sprintf("%d/%d", s.Tokens.Input, s.Tokens.Output), costCell(s.Cost.Model))
		if judged {
			judge := "-"
			if s.Cost.Judged {
				judge = costCell(s.Cost.Judge)
			}
			row = append(row, judge)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// costCell shows a cost in dollars, or "unknown" (never 0 for a model
// without pricing).
func costCell(d *float64) string {
	if d == nil {
		return "unknown"
	}
	return spend.FromDollars(*d).String()
}

// errorCount is how many records of a model on a dataset failed with one error.
type errorCount struct {
	Pair  string // model/dataset
	Error string
	Count int
	// Unit and At say where, for errors about a record of the data ("line 17:
	// invalid JSON"): the location is taken out of Error, so that one fault in
	// many records counts as one error, and the first few are kept here.
	Unit string
	At   []int
}

// maxDistinctErrors bounds the errors counted apart, whose texts may hold
// anything (a regex, a tool name).
const maxDistinctErrors = 10000

// maxLocations is how many record locations an error lists.
const maxLocations = 3

// recordLocation matches the start of a dataset record's error (see
// dataset.RecordError): "line 17: ", "element 3: ", "item 2: ".
var recordLocation = regexp.MustCompile(`^(line|element|item) ([0-9]+): `)

// topErrors reads results.jsonl and returns its n most common errors, most
// common first (ties by pair, then error text).
func topErrors(resultsFile string, n int) ([]errorCount, error) {
	f, err := os.Open(resultsFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct{ pair, err string }
	counts := map[key]*errorCount{}
	// Lines of any length: a record holds an answer of up to 16 MiB, which
	// JSON escaping can make six times longer (a scanner's cap would fail the
	// run on a hostile answer).
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		var r struct {
			Model, Dataset, Error string
		}
		if json.Unmarshal(line, &r) != nil || r.Error == "" {
			continue
		}
		text, unit, at := r.Error, "", 0
		if m := recordLocation.FindStringSubmatch(text); m != nil {
			if n, err := strconv.Atoi(m[2]); err == nil {
				text, unit, at = text[len(m[0]):], m[1], n
			}
		}
		k := key{r.Model + "/" + r.Dataset, text}
		c, ok := counts[k]
		if !ok {
			if len(counts) >= maxDistinctErrors {
				continue
			}
			c = &errorCount{Pair: k.pair, Error: k.err, Unit: unit}
			counts[k] = c
		}
		c.Count++
		if unit != "" && unit == c.Unit && len(c.At) < maxLocations {
			c.At = append(c.At, at)
		}
	}
	out := make([]errorCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b errorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Pair, b.Pair), cmp.Compare(a.Error, b.Error))
	})
	return out[:min(n, len(out))], nil
}

// where is " (line 3)", " (lines 3, 7, 9 and 12 more)", or "" for an error
// that is not about a record.
func (e errorCount) where() string {
	if len(e.At) == 0 {
		return ""
	}
	unit := e.Unit
	if e.Count > 1 {
		unit += "s"
	}
	nums := make([]string, len(e.At))
	for i, n := range e.At {
		nums[i] = strconv.Itoa(n)
	}
	s := " (" + unit + " " + strings.Join(nums, ", ")
	if more := e.Count - len(e.At); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s + ")"
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
		// Errors quote servers, agents and data: escape sequences in them must
		// not reach the terminal.
		fmt.Fprintf(w, "  %d× %s: %s%s\n", e.Count, terminalSafe(e.Pair), terminalSafe(text), e.where())
	}
}

// terminalSafe makes text from outside (model answers, server and agent
// errors, data) safe to print on a terminal on one line: control characters
// (escape sequences start with ESC or a C1 control), line and paragraph
// separators, the bidirectional overrides that make text display in another
// order, and bytes that are not UTF-8 are shown as Go escapes (\x1b, \u202e).
func terminalSafe(s string) string { return escapeForTerminal(s, false) }

// terminalSafeLines is terminalSafe for messages of several lines: newlines
// and tabs are kept.
func terminalSafeLines(s string) string { return escapeForTerminal(s, true) }

func escapeForTerminal(s string, lines bool) string {
	unsafe := func(r rune) bool { return unsafeRune(r) && (!lines || (r != '\n' && r != '\t')) }
	if strings.IndexFunc(s, unsafe) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unsafe(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r == '\u2028', r == '\u2029': // line and paragraph separators
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069', r == '\u200e', r == '\u200f', r == '\u061c':
		return true // bidirectional controls
	}
	return false
}
