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
	var total struct {
		calls               int
		in, out             int64
		inCost, cost, batch spend.Amount
		unknown             bool
	}
	var notes []string
	approx, agents := false, false
	bounds := map[string]bool{}
	for _, r := range rows {
		name := terminalSafe(r.Model)
		if r.Judge != "" {
			name += " (judging " + terminalSafe(r.Judge) + ")"
		}
		if r.Agent {
			agents = true
			total.unknown = true
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
		total.calls += r.Calls
		total.in += r.InputTokens
		total.out += r.OutputTokens
		if r.Cost == nil {
			total.unknown = true
		} else {
			total.inCost += *r.InputCost
			total.cost += *r.Cost
			total.batch += *r.BatchCost
		}
		bounds[fmt.Sprintf("%s: %d tokens a call (%s)", terminalSafe(r.Model), r.OutputPerCall, r.OutputFrom)] = true
	}
	cell := func(a spend.Amount) string {
		if total.unknown {
			return "unknown"
		}
		return a.String()
	}
	fmt.Fprintf(tw, "TOTAL\t\t%d\t%d\t%d\t%s\t%s\t%s\n", total.calls, total.in, total.out, cell(total.inCost), cell(total.cost), cell(total.batch))
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
	if agents {
		notes = append(notes, "Agents are not estimated: what they call depends on what they do.")
	}
	if budget != nil && budget.MaxCost != nil && !total.unknown {
		if limit, err := spend.ParseDollars(string(*budget.MaxCost)); err == nil {
			switch {
			case total.inCost > limit:
				notes = append(notes, fmt.Sprintf("spec.budget.maxCost %s is below the input alone (%s): the run will stop before its end.", limit, total.inCost))
			case total.cost > limit:
				notes = append(notes, fmt.Sprintf("spec.budget.maxCost %s may stop the run before its end (it costs at most %s).", limit, total.cost))
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
