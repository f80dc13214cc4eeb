package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// Service is a program that runs beside the samples, such as the database an
// agent works on: in a cluster a container of every runner pod (a native
// sidecar, started and ready before the runner, stopped after it), in a local
// run a process of proctor's own with the same lifecycle. Each runner pod has
// services of its own, so shards never share their state.
// +kubebuilder:validation:XValidation:rule=`!(self.name in ['runner', 'agent', 'hooks', 'install-proctor'])`,message="service names runner, agent, hooks and install-proctor are taken by Proctor's own containers",fieldPath=".name"
type Service struct {
	// name of the service, a DNS label: its container's name, and the name
	// errors and conditions give it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// image of the service's container (cluster mode). A local run starts
	// command instead, and refuses a service that has only an image.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// command is the argv (the image's entrypoint when unset, in a cluster).
	// A local run starts it as a process, the program looked up in PATH, in
	// a working directory of the service's own, which both modes name in
	// PROCTOR_SERVICE_DIR.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Command []string `json:"command,omitempty"`

	// args follow command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Args []string `json:"args,omitempty"`

	// env is the service's environment. valueFrom (Secrets, ConfigMaps) works
	// in a cluster; in a local run an entry without a value is taken from
	// proctor's own environment.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// ports the service listens on, on the pod's loopback, which the runner
	// and the agent share (locally, the machine's). A named port can be
	// named by the readiness probe.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Ports []ServicePort `json:"ports,omitempty"`

	// readinessProbe says when the service can take work. The runner starts
	// no hook and no sample before every service is ready; one that is not
	// ready within initialDelaySeconds + periodSeconds × failureThreshold
	// fails the run, naming it (ServiceNotReady). While samples run, one
	// failed probe counts the service down: a sample that fails then is the
	// service's error (kind service), and no sample starts until it is back.
	// Without a probe a service is ready once started. exec, httpGet and
	// tcpSocket work in both modes; grpc in a cluster only. In a cluster the
	// runner probes exec and grpc services by connecting to their first port.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`(has(self.exec) ? 1 : 0) + (has(self.httpGet) ? 1 : 0) + (has(self.tcpSocket) ? 1 : 0) + (has(self.grpc) ? 1 : 0) == 1`,message="readinessProbe needs exactly one of exec, httpGet, tcpSocket or grpc"
	ReadinessProbe *corev1.Probe `json:"readinessProbe,omitempty"`

	// resources of the service's container (cluster mode). Unset, it has the
	// operator's defaults for an agent's container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ServicePort is a port a service listens on.
// +kubebuilder:validation:XValidation:rule=`self.containerPort != 9464`,message="port 9464 is taken in runner pods: the runner serves its metrics there",fieldPath=".containerPort"
type ServicePort struct {
	// name of the port, for the readiness probe.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// containerPort is the TCP port number.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort int32 `json:"containerPort"`
}

// Hooks are commands that prepare the state each sample runs against: once
// per runner pod (or local run) when its services are ready, and before and
// after each sample in the sample's slot. Each element of a command is a Go
// template over .Slot (the sample's slot, 0 to .Slots-1: no two samples in
// flight share one), .Slots, .ID, .Sample (the dataset record, so that
// seeding can follow the sample), .Model and .Dataset; setup sees .Slots and
// .Model (a runner pod's model; empty in a local run) only. The variables PROCTOR_SLOT, PROCTOR_SLOTS and
// PROCTOR_SAMPLE_ID say the same. The agent sees its slot too ({{ .Slot }}
// in its templates, PROCTOR_SLOT in its environment).
type Hooks struct {
	// image the hooks run in (cluster mode), in a container of their own
	// beside the runner: its tools (psql, say) and hooks.env are there, and
	// nowhere else. Default the agent's image; a model that is not an agent
	// needs it. A local run starts the hooks as processes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// env of the hooks, besides PATH and HOME: often the credentials of a
	// database's owner, which the agent does not get. valueFrom works in a
	// cluster; in a local run an entry without a value is taken from
	// proctor's own environment.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// setup runs once the services are ready, before any sample: once per
	// runner pod, or per local run. It might create a seeded template
	// database and one copy per slot. If it fails, the run fails
	// (HookFailed) and no sample runs. Its timeout: default 10m.
	// +optional
	Setup *Hook `json:"setup,omitempty"`

	// beforeSample runs before each sample, in its slot: it might recreate
	// database crm_{{ .Slot }} from the template and seed the sample's own
	// rows. If it fails, the sample's record is an error of kind hook, and
	// its slot takes no other sample until the hook succeeds on it again.
	// Its timeout: default 1m.
	// +optional
	BeforeSample *Hook `json:"beforeSample,omitempty"`

	// afterSample runs after each sample, in its slot, whatever its outcome.
	// If it fails, the sample's record stands; its slot takes no other sample
	// until a hook succeeds on it again. Its timeout: default 1m.
	// +optional
	AfterSample *Hook `json:"afterSample,omitempty"`

	// repairTimeout bounds how long a slot whose hook failed may stay out of
	// use: its hook is tried again, backing off, until it succeeds (a
	// restarted service, say); past this the run fails (HookFailed), leaving
	// the samples it did not finish to the next run. A duration such as 5m,
	// at most 24h. Default 5m.
	// +optional
	RepairTimeout *Timeout `json:"repairTimeout,omitempty"`
}

// Hook is one command the runner runs.
type Hook struct {
	// command is the argv; each element is a template (see hooks). No shell
	// is involved: give one (["sh", "-c", "..."]) for pipes and &&. Its
	// first element, the program, must not be empty.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=131072
	// +kubebuilder:validation:XValidation:rule=`self.size() == 0 || self[0].trim() != ''`,message="a hook's command must start with the program to run"
	// +listType=atomic
	Command []string `json:"command"`

	// stdin is a template written to the hook's standard input, such as the
	// SQL that seeds the sample's rows.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Stdin string `json:"stdin,omitempty"`

	// timeout bounds one run of the hook; its whole process group is killed
	// when it expires. A duration such as 30s, at most 24h.
	// +optional
	Timeout *Timeout `json:"timeout,omitempty"`
}
