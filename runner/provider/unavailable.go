package provider

import "errors"

// UnavailableError says that a provider cannot serve any request for a reason
// that is not the sample's: the agent executor of a runner pod is gone (its
// container died or restarted). The engine gives the sample no record and
// stops the model's part of the run, which then fails; a resumed run takes the
// sample up again. An error record would lower the score for the pod's fault.
type UnavailableError struct {
	Err error
}

func (e *UnavailableError) Error() string { return "provider unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err is, or wraps, an *UnavailableError.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}
