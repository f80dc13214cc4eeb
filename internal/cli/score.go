package cli

import (
	"time"

	"github.com/spf13/cobra"
)

func newScoreCommand(s streams) *cobra.Command {
	o := &runOptions{rescore: true}
	cmd := &cobra.Command{
		Use:   "score [-f] EVALUATION.yaml [-o DIR]",
		Short: "Score a run's answers again with the Evaluation's current scoring, calling no model but judges",
		Long: `Score every answer a local run kept in DIR again, with the scoring the Evaluation file says
now: scorers added, changed or removed, a judge's prompt or model fixed. No model under
evaluation is called; only judges are, and only for the scorers whose scores are missing
(scores of unchanged scorers that succeeded are kept: use --all to score everything again).
DIR then holds results.jsonl and summary.json as proctor run writes them.

DIR may also hold results fetched from a cluster (proctor results NAME -o DIR): their
answers are placed by sample id and scored with every scorer; answers the cluster cut
(outputTruncated) stay unanswered, as scores of a part would not be the answer's. (In a
cluster itself, editing the Evaluation's scoring scores its answers again.)

proctor run does this by itself when the scoring alone changed since DIR's answers were
made; proctor score is for scoring again when nothing changed (a flaky judge, say), and
never calls the models: samples without an answer stay unanswered (proctor run answers
them). The model, the prompt and the data must be those the answers were made with; if
they changed, the answers are for other requests and are refused, naming what changed.

Exit codes are proctor run's.`,
		Example: `  proctor score -f evaluation.yaml -o out/
  proctor score evaluation.yaml -o out/ --all
  proctor results nightly -o fetched/ && proctor score -f evaluation.yaml -o fetched/`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFile(cmd, args, o, s, "proctor score -f EVALUATION.yaml -o DIR")
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "the Evaluation manifest (YAML); - reads it from standard input")
	f.StringVarP(&o.output, "output", "o", "", "the results directory or s3:// location of a proctor run (default results/NAME, NAME being the Evaluation's)")
	f.BoolVar(&o.rescoreAll, "all", false, "score every answer with every scorer, also the scores of unchanged scorers")
	f.IntVar(&o.concurrency, "concurrency", 0, "answers scored at a time per model, overriding the file")
	f.DurationVar(&o.gracePeriod, "grace-period", 30*time.Second, "on interrupt, how long scorings in flight may take to finish")
	f.StringVar(&o.progress, "progress", "auto", "progress display: auto (a bar on a terminal, else lines), bar, plain or none")
	return cmd
}
