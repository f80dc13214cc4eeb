package cli

import (
	"bytes"
	"testing"

	"github.com/proctor-dev/proctor/internal/cluster"
)

// TestPodArgs: the arguments the controller gives runner pods (cluster.ShardArgs,
// PlanArgs, FlagAgentSocket) are what the pods' commands parse.
func TestPodArgs(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want map[string]string
	}{
		{"shard", append(cluster.ShardArgs("qa", "abc123", "small", 4, 3), "--"+cluster.FlagAgentSocket, "/run/proctor/agent.sock"), map[string]string{
			cluster.FlagEvaluation: "qa", cluster.FlagRun: "abc123", cluster.FlagModel: "small", cluster.FlagAgentSocket: "/run/proctor/agent.sock",
			cluster.FlagWorkers: "4", cluster.FlagShardRetries: "3",
		}},
		{"plan", cluster.PlanArgs("qa", "abc123", 1<<20), map[string]string{
			cluster.FlagEvaluation: "qa", cluster.FlagRun: "abc123", cluster.FlagStorageBudget: "1048576",
		}},
		{"plan, unbounded", cluster.PlanArgs("qa", "abc123", -1), map[string]string{cluster.FlagStorageBudget: "0"}},
	}
	for _, tc := range cases {
		root := newRootCommand(streams{out: &bytes.Buffer{}, errOut: &bytes.Buffer{}})
		cmd, rest, err := root.Find(tc.args)
		if err != nil || cmd.Name() != tc.args[0] {
			t.Fatalf("%s: %v finds command %q, %v", tc.name, tc.args, cmd.Name(), err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatalf("%s: parsing %v: %v", tc.name, rest, err)
		}
		for flag, want := range tc.want {
			if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
				t.Errorf("%s: --%s = %q, want %q", tc.name, flag, got, want)
			}
		}
	}
}
