package compile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/services"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider/agent"
)

// buildHooks gives plan the spec's hooks (spec.hooks), run as agents are: a
// local process each, with hooks.env; or, in a runner pod, by the executor of
// the hooks' container (HookExecutor), whose environment has hooks.env.
func buildHooks(ctx context.Context, spec *v1alpha1.EvaluationSpec, plan *runner.Plan, env Env) error {
	h := spec.Hooks
	if h == nil {
		return nil
	}
	const path = "spec.hooks"
	plan.RepairTimeout = h.RepairTimeout.Duration
	var base agent.Config
	switch {
	case env.Cluster && env.HookExecutor != "":
		vars := make([]agent.EnvVar, 0, len(agentBaseEnv)+len(h.Env))
		for _, name := range agentBaseEnv {
			vars = append(vars, agent.EnvVar{Name: name, FromExecutor: true})
		}
		for _, e := range h.Env {
			if e.Value != "" {
				vars = append(vars, agent.EnvVar{Name: e.Name, Value: e.Value})
			} else {
				vars = append(vars, agent.EnvVar{Name: e.Name, FromExecutor: true, Required: true, Secret: true})
			}
		}
		base.Executor = &agent.ExecutorConfig{Socket: env.HookExecutor, Env: vars}
	default:
		// A local run; or Check, which runs nothing (its LookupEnv stands in
		// for the hooks container's variables).
		vars, secrets, err := localEnvironment(h.Env, path+".env", env)
		if err != nil {
			return err
		}
		base.Env = vars
		plan.Secrets = append(plan.Secrets, secrets...)
	}
	base.BaseDir, base.WorkspaceRoot = env.BaseDir, env.WorkspaceRoot
	plan.Hooks = &runner.Hooks{}
	for _, hk := range []struct {
		name string
		spec *v1alpha1.Hook
		dst  **runner.Hook
	}{
		{"setup", h.Setup, &plan.Hooks.Setup},
		{"beforeSample", h.BeforeSample, &plan.Hooks.BeforeSample},
		{"afterSample", h.AfterSample, &plan.Hooks.AfterSample},
	} {
		if hk.spec == nil {
			continue
		}
		cfg := base
		cfg.Command, cfg.Stdin = hk.spec.Command, hk.spec.Stdin
		p, err := agent.New(cfg)
		if err != nil {
			return fmt.Errorf("%s.%s.%w", path, hk.name, err)
		}
		if cfg.Executor != nil {
			if err := p.Connect(ctx); err != nil {
				return fmt.Errorf("%s.%s: %w", path, hk.name, err)
			}
		}
		*hk.dst = &runner.Hook{Name: hk.name, Provider: p, Timeout: hk.spec.Timeout.Duration}
	}
	return nil
}

// checkHookTemplates renders the hooks' templates for sample s of dataset ds
// (setup's with no sample), so that a field the data lacks fails before the
// run rather than in every slot.
func checkHookTemplates(plan *runner.Plan, s *dataset.Sample, ds, where string) error {
	h := plan.Hooks
	if h == nil {
		return nil
	}
	if h.Setup != nil {
		if err := h.Setup.Provider.(*agent.Provider).CheckTemplates(agent.TemplateData{Slots: 1}); err != nil {
			return fmt.Errorf("spec.hooks.setup: %w (setup sees .Slots and .Model, not a sample)", err)
		}
	}
	for _, hook := range []*runner.Hook{h.BeforeSample, h.AfterSample} {
		if hook == nil {
			continue
		}
		data := agent.TemplateData{Sample: s.Fields, ID: s.ID, Slots: 1, Dataset: ds}
		if err := hook.Provider.(*agent.Provider).CheckTemplates(data); err != nil {
			return fmt.Errorf("spec.hooks.%s: %s: %w", hook.Name, where, err)
		}
	}
	return nil
}

// localEnvironment is the environment of a process of a local run (an
// agent, a hook, a service) from env entries: proctor's base variables, then
// extra, then each entry (a later one of a name winning), one without a value
// taken from proctor's own environment. It returns the values to keep out of
// records too.
func localEnvironment(vars []corev1.EnvVar, path string, env Env, extra ...string) ([]string, []string, error) {
	var out, secrets []string
	for _, name := range agentBaseEnv {
		if v, ok := env.LookupEnv(name); ok {
			out = append(out, name+"="+v)
		}
	}
	out = append(out, extra...)
	for i, e := range vars {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case e.ValueFrom != nil && !env.Cluster:
			return nil, nil, fmt.Errorf("%s.valueFrom: only works in a cluster; in a local run give a value, "+
				"or no value to pass on proctor's own %s", p, e.Name)
		case e.Value != "":
			out = append(out, e.Name+"="+e.Value)
		default:
			v, ok := env.LookupEnv(e.Name)
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s has no value and is not set in proctor's environment", p, e.Name)
			}
			out = append(out, e.Name+"="+v)
			// Passed-through variables are usually credentials: keep them out of records.
			if len(v) >= 8 {
				secrets = append(secrets, v)
			}
		}
	}
	return out, secrets, nil
}

// Services are the spec's services as local processes (spec.services), for
// services.Start, and the values of their environments to keep out of
// records. A service with only an image, or a grpc probe, cannot run here.
func Services(spec *v1alpha1.EvaluationSpec, env Env) ([]services.Config, []string, error) {
	if env.LookupEnv == nil {
		env.LookupEnv = os.LookupEnv
	}
	var out []services.Config
	var secrets []string
	for i := range spec.Services {
		s := &spec.Services[i]
		path := fmt.Sprintf("spec.services[%d]", i)
		if len(s.Command) == 0 {
			return nil, nil, fmt.Errorf("%s: service %s has only an image (%s): a local run starts a service's command (and args) "+
				"as a process of its own; give command, or run the Evaluation in a cluster", path, s.Name, s.Image)
		}
		if p := s.ReadinessProbe; p != nil && p.GRPC != nil {
			return nil, nil, fmt.Errorf("%s.readinessProbe.grpc: a local run probes with exec, httpGet or tcpSocket only", path)
		}
		vars, sec, err := localEnvironment(s.Env, path+".env", env)
		if err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, sec...)
		argv := append(slices.Clone(s.Command), s.Args...)
		// As for agents: a relative program is the Evaluation file's neighbour.
		if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
			argv[0] = filepath.Join(env.BaseDir, argv[0])
		}
		c := services.Config{Name: s.Name, Argv: argv, Env: vars, Probe: s.ReadinessProbe, Ports: map[string]int32{}}
		for _, p := range s.Ports {
			if p.Name != "" {
				c.Ports[p.Name] = p.ContainerPort
			}
		}
		out = append(out, c)
	}
	return out, secrets, nil
}

// WatchedServices are the spec's services as a runner pod's runner watches
// them (services.Watch): the kubelet runs them and their probes, and the
// runner, beside them on the pod's network, runs what it can of each
// readinessProbe itself: httpGet and tcpSocket as they are; for exec and
// grpc, a connection to the service's first port. A service without either
// is taken to be up.
func WatchedServices(spec *v1alpha1.EvaluationSpec) []services.Config {
	var out []services.Config
	for i := range spec.Services {
		s := &spec.Services[i]
		c := services.Config{Name: s.Name, Ports: map[string]int32{}}
		for _, p := range s.Ports {
			if p.Name != "" {
				c.Ports[p.Name] = p.ContainerPort
			}
		}
		if p := s.ReadinessProbe; p != nil {
			probe := p.DeepCopy()
			if probe.HTTPGet == nil && probe.TCPSocket == nil {
				probe.Exec, probe.GRPC = nil, nil
				if len(s.Ports) > 0 {
					probe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(s.Ports[0].ContainerPort)}
				}
			}
			if probe.HTTPGet != nil || probe.TCPSocket != nil {
				c.Probe = probe
			}
		} else if len(s.Ports) > 0 {
			c.Probe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(s.Ports[0].ContainerPort)}}, PeriodSeconds: 1}
		}
		out = append(out, c)
	}
	return out
}
