package config

import "errors"

// FieldError is one problem with one configuration key. Key uses the dotted form with
// list indexes in brackets (routes[0].from.kafka.topic); it is "" for a problem with a
// whole source (an unreadable file). Source says where the value came from: "default",
// "file PATH", "env NAME", "flag --set KEY", or "not set".
type FieldError struct {
	Key    string
	Source string
	Msg    string
}

func (e *FieldError) Error() string {
	switch {
	case e.Key == "":
		return e.Source + ": " + e.Msg
	case e.Source == "":
		return e.Key + ": " + e.Msg
	default:
		return e.Key + ": " + e.Msg + " (" + e.Source + ")"
	}
}

// FieldErrors flattens err (as returned by Load or Validate, possibly joined) into its
// FieldErrors; other errors become a FieldError with only Msg.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	for _, e := range leafErrors(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		} else {
			out = append(out, &FieldError{Msg: e.Error()})
		}
	}
	return out
}

// leafErrors flattens errors.Join trees (as Validate and mapstructure build them).
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leafErrors(e)...)
	}
	return out
}
