package compile

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/cache"
)

// Check compiles every model, scorer and dataset of ev as the runner pods will,
// without their API keys, and returns each dataset's number of samples (after
// its limit). It is what a cluster checks while planning a run, before any Job
// starts: templates that do not parse, a template naming a field the data
// lacks, a bad rubric, unreadable data. env says where the data is
// (ResolveSource, DataDir, HTTPClient); its LookupEnv and Cache are ignored.
func Check(ctx context.Context, ev *v1alpha1.Evaluation, env Env) (map[string]int, error) {
	env.LookupEnv = nil
	plan, err := CheckPlan(ctx, ev, env)
	if err != nil {
		return nil, err
	}
	return plan.Totals(), nil
}

// CheckPlan is Check that returns the compiled plan. Its models have the
// keys env.LookupEnv holds (the planner's, to count tokens for an estimate),
// and any other value where it holds none: it is for counting, never for
// calling a model.
func CheckPlan(ctx context.Context, ev *v1alpha1.Evaluation, env Env) (*runner.Plan, error) {
	env.Cluster = true
	env.Models, env.Datasets = nil, nil
	// Keys and passed-through variables are the pods' business: any value does,
	// since nothing is called.
	lookup := env.LookupEnv
	env.LookupEnv = func(name string) (string, bool) {
		if lookup != nil {
			if v, ok := lookup(name); ok && v != "" {
				return v, true
			}
		}
		return "unused-by-check", true
	}
	env.Cache = noCache{}
	// So are the endpoints agents call, which the controller does not read
	// (it checks that they are there): any will do, since nothing is called.
	endpoints := maps.Clone(env.ModelEndpoints)
	for _, c := range apiconv.EndpointCallers(&ev.Spec) {
		if c.Agent != nil && endpoints[c.Ref.Name] == nil {
			if endpoints == nil {
				endpoints = map[string]*v1alpha1.ModelEndpointSpec{}
			}
			endpoints[c.Ref.Name] = &v1alpha1.ModelEndpointSpec{Provider: v1alpha1.EndpointProvider(v1alpha1.ProviderOpenAI), BaseURL: "http://proctor-check.invalid"}
		}
	}
	env.ModelEndpoints = endpoints
	return Build(ctx, ev, env)
}

// noCache is the response cache of a check, which makes no calls.
type noCache struct{}

func (noCache) Get(string) (*cache.Entry, bool) { return nil, false }
func (noCache) Put(string, *cache.Entry) error  { return nil }

// CheckData is Check for a spec whose datasets the caller holds in memory (the
// controller: inline data, and its snapshots of ConfigMap datasets), by dataset
// name. A dataset whose data is not in data cannot be checked and is an error.
func CheckData(ctx context.Context, ev *v1alpha1.Evaluation, data map[string][]byte) error {
	dir, err := os.MkdirTemp("", "proctor-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, err = Check(ctx, ev, Env{
		DataDir: dir,
		ResolveSource: func(ds *v1alpha1.Dataset) (string, error) {
			b, ok := data[ds.Name]
			if !ok {
				return "", fmt.Errorf("the controller holds no data for dataset %s", ds.Name)
			}
			path := filepath.Join(dir, "configmap-"+ds.Name)
			return path, os.WriteFile(path, b, 0o600)
		},
	})
	return err
}
