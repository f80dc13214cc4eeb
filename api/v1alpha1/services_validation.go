package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxServiceName bounds a service's name (its container's).
const MaxServiceName = 40

// reservedServiceNames are the runner pods' own containers.
var reservedServiceNames = []string{"runner", "agent", "hooks", "install-proctor"}

func validateServices(services []Service, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(services) > MaxServices {
		errs = append(errs, field.TooMany(p, len(services), MaxServices))
	}
	seen := sets.New[string]()
	for i := range services {
		s := &services[i]
		sp := p.Index(i)
		errs = append(errs, validateName(s.Name, MaxServiceName, sp.Child("name"))...)
		switch {
		case slices.Contains(reservedServiceNames, s.Name):
			errs = append(errs, field.Invalid(sp.Child("name"), s.Name,
				"service names runner, agent, hooks and install-proctor are taken by Proctor's own containers"))
		case seen.Has(s.Name):
			errs = append(errs, field.Duplicate(sp.Child("name"), s.Name))
		}
		seen.Insert(s.Name)
		if strings.TrimSpace(s.Image) == "" {
			errs = append(errs, field.Required(sp.Child("image"), "the service's container image"))
		}
		errs = append(errs, validateEnvNames(s.Env, sp.Child("env"))...)
		ports := sets.New[string]()
		for j, port := range s.Ports {
			pp := sp.Child("ports").Index(j)
			if port.ContainerPort < 1 || port.ContainerPort > 65535 {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, "must be between 1 and 65535"))
			}
			if port.Name != "" {
				if ports.Has(port.Name) {
					errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
				}
				ports.Insert(port.Name)
			}
		}
		if len(s.Ports) > 8 {
			errs = append(errs, field.TooMany(sp.Child("ports"), len(s.Ports), 8))
		}
		errs = append(errs, validateProbe(s.ReadinessProbe, ports, sp.Child("readinessProbe"))...)
	}
	return errs
}

// validateProbe checks what a local run needs of a probe: one handler, and a
// named port that the service declares.
func validateProbe(pr *corev1.Probe, ports sets.Set[string], p *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	n := 0
	var port *intstr.IntOrString
	var portPath *field.Path
	if pr.Exec != nil {
		n++
		if len(pr.Exec.Command) == 0 {
			return field.ErrorList{field.Required(p.Child("exec", "command"), "")}
		}
	}
	if pr.HTTPGet != nil {
		n++
		port, portPath = &pr.HTTPGet.Port, p.Child("httpGet", "port")
	}
	if pr.TCPSocket != nil {
		n++
		port, portPath = &pr.TCPSocket.Port, p.Child("tcpSocket", "port")
	}
	if pr.GRPC != nil {
		n++
	}
	if n != 1 {
		return field.ErrorList{field.Invalid(p, "", "needs exactly one of exec, httpGet, tcpSocket or grpc")}
	}
	if port != nil {
		switch {
		case port.Type == intstr.String && !ports.Has(port.StrVal):
			return field.ErrorList{field.Invalid(portPath, port.StrVal, "must name one of the service's ports")}
		case port.Type == intstr.Int && (port.IntVal < 1 || port.IntVal > 65535):
			return field.ErrorList{field.Invalid(portPath, port.IntVal, "must be between 1 and 65535")}
		}
	}
	return nil
}

func validateHooks(spec *EvaluationSpec, p *field.Path) field.ErrorList {
	h := spec.Hooks
	if h == nil {
		return nil
	}
	errs := validateEnvNames(h.Env, p.Child("env"))
	for i := range spec.Models {
		if spec.Models[i].Batch != nil {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("hooks do not apply to spec.models[%d] (%s), which has batch: its samples run in the provider's batch, not in slots",
				i, spec.Models[i].Name)))
			break
		}
	}
	if h.Image == "" {
		judges := spec.JudgeModels()
		for i := range spec.Models {
			if m := &spec.Models[i]; m.Provider != ProviderAgent && !judges[m.Name] {
				errs = append(errs, field.Required(p.Child("image"), fmt.Sprintf("the image the hooks run in (with their tools): "+
					"spec.models[%d] (%s) is not an agent, whose image they would use", i, m.Name)))
				break
			}
		}
	}
	for _, hk := range []struct {
		hook *Hook
		name string
	}{{h.Setup, "setup"}, {h.BeforeSample, "beforeSample"}, {h.AfterSample, "afterSample"}} {
		if hk.hook == nil {
			continue
		}
		hp := p.Child(hk.name)
		if len(hk.hook.Command) == 0 || strings.TrimSpace(hk.hook.Command[0]) == "" {
			errs = append(errs, field.Required(hp.Child("command"), `the hook's argv, e.g. ["psql", "-c", "..."]`))
		}
		errs = append(errs, validateDuration(hk.hook.Timeout, true, hp.Child("timeout"))...)
	}
	return append(errs, validateDuration(h.RepairTimeout, true, p.Child("repairTimeout"))...)
}

func validateEnvNames(env []corev1.EnvVar, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range env {
		if !envNameRE.MatchString(e.Name) {
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), e.Name, "must be an environment variable name"))
		}
	}
	return errs
}
