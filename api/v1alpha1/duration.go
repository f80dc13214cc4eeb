package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The API's durations are written as Go writes them: 90s, 2m, 1h30m (the
// form of Go's time.ParseDuration, which metav1.Duration reads). Each kind of
// duration is a named type whose one CEL rule says both the form and the
// bounds, so that no field repeats them and a bad value gets one message:
// CEL's duration() fails on a string that is not a duration, so a bound has
// to be guarded by the form within the same rule (false && error is false).
// The types marshal as metav1.Duration does.

// Timeout is a duration longer than 0s and at most 24h.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) > duration('0s') && duration(self) <= duration('24h')`,message="must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m"
type Timeout metav1.Duration

// Backoff is a duration of 0s to 24h.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s') && duration(self) <= duration('24h')`,message="must be a duration of 0s to 24h, such as 1s or 60s"
type Backoff metav1.Duration

// ThrottleWait is a duration of 1s to 24h.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')`,message="must be a duration of 1s to 24h, such as 90s, 10m or 1h30m"
type ThrottleWait metav1.Duration

// Burst is how much of a rate limit a bucket holds, as a duration of 1s to 1m.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('1s') && duration(self) <= duration('1m')`,message="must be a duration of 1s to 1m, such as 1s or 10s"
type Burst metav1.Duration

// PollInterval is a duration of 100ms to 1h.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('100ms') && duration(self) <= duration('1h')`,message="must be a duration of 100ms to 1h, such as 30s"
type PollInterval metav1.Duration

// Retention is a duration of 0s to 720h (30 days).
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s') && duration(self) <= duration('720h')`,message="must be a duration of 0s to 720h, such as 0s, 30m or 24h"
type Retention metav1.Duration

// The JSON of each type is metav1.Duration's (a string such as "1m30s").

func (d Timeout) MarshalJSON() ([]byte, error)       { return metav1.Duration(d).MarshalJSON() }
func (d *Timeout) UnmarshalJSON(b []byte) error      { return (*metav1.Duration)(d).UnmarshalJSON(b) }
func (d Backoff) MarshalJSON() ([]byte, error)       { return metav1.Duration(d).MarshalJSON() }
func (d *Backoff) UnmarshalJSON(b []byte) error      { return (*metav1.Duration)(d).UnmarshalJSON(b) }
func (d ThrottleWait) MarshalJSON() ([]byte, error)  { return metav1.Duration(d).MarshalJSON() }
func (d *ThrottleWait) UnmarshalJSON(b []byte) error { return (*metav1.Duration)(d).UnmarshalJSON(b) }
func (d Burst) MarshalJSON() ([]byte, error)         { return metav1.Duration(d).MarshalJSON() }
func (d *Burst) UnmarshalJSON(b []byte) error        { return (*metav1.Duration)(d).UnmarshalJSON(b) }
func (d PollInterval) MarshalJSON() ([]byte, error)  { return metav1.Duration(d).MarshalJSON() }
func (d *PollInterval) UnmarshalJSON(b []byte) error { return (*metav1.Duration)(d).UnmarshalJSON(b) }
func (d Retention) MarshalJSON() ([]byte, error)     { return metav1.Duration(d).MarshalJSON() }
func (d *Retention) UnmarshalJSON(b []byte) error    { return (*metav1.Duration)(d).UnmarshalJSON(b) }
