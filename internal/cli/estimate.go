package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/estimate"
	"github.com/proctor-dev/proctor/runner/spend"
)

// printEstimate prints one row per model (and judge) and dataset, a total,
// and on errOut what the figures rest on.
func printEstimate(w, errOut io.Writer, rows []estimate.Row, budget *v1alpha1.Budget) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join([]string{"MODEL", "DATASET", "CALLS", "INPUT TOKENS", "OUTPUT TOKENS ≤", "INPUT COST", "COST ≤", "BATCH COST ≤"}, "\t"))
	var notes []string
	approx := false
	bounds := map[string]bool{}
	for _, r := range rows {
		name := terminalSafe(r.Model)
		if r.Judge != "" {
			name += " (judging " + terminalSafe(r.Judge) + ")"
		}
		if r.Agent {
			fmt.Fprintf(tw, "%s\t%s\t%d\tnot estimated\t-\t-\t-\t-\n", name, terminalSafe(r.Dataset), r.Calls)
			continue
		}
		in := fmt.Sprint(r.InputTokens)
		if !r.Exact || r.Judge != "" {
			in = "~" + in
		}
		approx = approx || !r.Exact
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", name, terminalSafe(r.Dataset), r.Calls, in, r.OutputTokens,
			amountCell(r.InputCost), amountCell(r.Cost), amountCell(r.BatchCost))
		bounds[fmt.Sprintf("%s: %d tokens a call (%s)", terminalSafe(r.Model), r.OutputPerCall, r.OutputFrom)] = true
	}
	total := estimate.Sum(rows)
	cell := func(a spend.Amount) string {
		if total.Unknown {
			return "unknown"
		}
		return a.String()
	}
	fmt.Fprintf(tw, "TOTAL\t\t%d\t%d\t%d\t%s\t%s\t%s\n", total.Calls, total.InputTokens, total.OutputTokens, cell(total.InputCost), cell(total.Cost), cell(total.BatchCost))
	tw.Flush()

	notes = append(notes, "No model was called: input tokens are counted by the providers' token counting endpoints, from the prompts as the run renders them.")
	if approx {
		notes = append(notes, "~: estimated from the prompts' length where a server has no token counting endpoint.")
	}
	for _, r := range rows {
		if r.Judge != "" {
			notes = append(notes, "A judge's input holds the answer it judges, counted at the answer's bound.")
			break
		}
	}
	for _, b := range slices.Sorted(maps.Keys(bounds)) {
		notes = append(notes, "Answers are bounded by "+b+".")
	}
	if total.Agents {
		notes = append(notes, "Agents are not estimated: what they call depends on what they do.")
	}
	if budget != nil && budget.MaxCost != nil && !total.Unknown {
		if limit, err := spend.ParseDollars(string(*budget.MaxCost)); err == nil {
			switch {
			case total.InputCost > limit:
				notes = append(notes, fmt.Sprintf("spec.budget.maxCost %s is below the input alone (%s): the run will stop before its end.", limit, total.InputCost))
			case total.RunCost > limit:
				// At the batch price for models in batch mode.
				notes = append(notes, fmt.Sprintf("spec.budget.maxCost %s may stop the run before its end (it costs at most %s).", limit, total.RunCost))
			default:
				notes = append(notes, fmt.Sprintf("spec.budget.maxCost %s covers the run at its bound.", limit))
			}
		}
	}
	for _, n := range notes {
		fmt.Fprintln(errOut, n)
	}
}

// amountCell shows an amount, or "unknown" without pricing.
func amountCell(a *spend.Amount) string {
	if a == nil {
		return "unknown"
	}
	return a.String()
}
