package dataset

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strings"
)

// DuplicateIDError is a dataset in which two samples have the same id: their
// results would be two records with one id, which nothing downstream can tell
// apart (a resume, a comparison of runs, a join on id).
type DuplicateIDError struct {
	ID string
	// Unit is the readers' unit ("line", "element", "item"); First and Second
	// are the two samples' positions in it.
	Unit          string
	First, Second int
}

func (e *DuplicateIDError) Error() string {
	if strings.HasPrefix(e.ID, ContentIDPrefix) {
		return fmt.Sprintf("%s %d: the same record as %s %d; a record without an id is identified by its content, so two equal ones "+
			"cannot be told apart: remove the repeat, or give the records ids", e.Unit, e.Second, e.Unit, e.First)
	}
	return fmt.Sprintf("%s %d: id %q is already the id of %s %d; ids must be unique", e.Unit, e.Second, e.ID, e.Unit, e.First)
}

// unitOf is the unit a Reader counts Sample.Line in.
func unitOf(r Reader) string {
	switch r.(type) {
	case *jsonReader:
		return "element"
	case *inlineReader:
		return "item"
	}
	return "line"
}

// CheckIDs reads the first n samples of the data open returns and reports the
// first id that two of them share as a *DuplicateIDError. Ids are remembered as
// 64-bit hashes, 8 bytes a sample, so that a million samples cost 8 MB rather
// than their ids; only when two hashes are equal is the data read again, to
// tell a real duplicate from a collision and to find the lines. Unreadable
// records count with the id they are reported under (their position).
func CheckIDs(open func() (Reader, io.Closer, error), n int) error {
	_, err := Check(open, n)
	return err
}

// Report is what Check found in a dataset that does not refuse it.
type Report struct {
	// InvalidUTF8 counts the records holding bytes that are not UTF-8;
	// FirstInvalidUTF8 is the first one's position (in Unit).
	InvalidUTF8, FirstInvalidUTF8 int
	Unit                          string
}

// Check reads the first n samples as CheckIDs does, in the same pass, and
// reports what deserves a warning: records that are not UTF-8.
func Check(open func() (Reader, io.Closer, error), n int) (Report, error) {
	var rep Report
	seed := maphash.MakeSeed()
	hashes := make([]uint64, 0, min(n, 1<<20))
	err := EachSample(func() (Reader, io.Closer, error) {
		r, c, err := open()
		if err == nil {
			rep.Unit = unitOf(r)
		}
		return r, c, err
	}, n, func(s *Sample) error {
		hashes = append(hashes, maphash.String(seed, s.ID))
		if s.InvalidUTF8 {
			if rep.InvalidUTF8 == 0 {
				rep.FirstInvalidUTF8 = s.Line
			}
			rep.InvalidUTF8++
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	return rep, checkHashes(open, n, seed, hashes)
}

// checkHashes finds, among samples whose id hashes are equal, two with the
// same id.
func checkHashes(open func() (Reader, io.Closer, error), n int, seed maphash.Seed, hashes []uint64) error {
	slices.Sort(hashes)
	suspects := map[uint64]bool{}
	for i := 1; i < len(hashes); i++ {
		if hashes[i] == hashes[i-1] {
			suspects[hashes[i]] = true
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	first := map[string]int{}
	errDup := errors.New("duplicate")
	var dup *DuplicateIDError
	var unit string
	err := EachSample(func() (Reader, io.Closer, error) {
		r, c, err := open()
		if err == nil {
			unit = unitOf(r)
		}
		return r, c, err
	}, n, func(s *Sample) error {
		if !suspects[maphash.String(seed, s.ID)] {
			return nil
		}
		if line, ok := first[s.ID]; ok {
			dup = &DuplicateIDError{ID: s.ID, Unit: unit, First: line, Second: s.Line}
			return errDup
		}
		first[s.ID] = s.Line
		return nil
	})
	if dup != nil {
		return dup
	}
	return err
}

// EachSample calls fn on each of the first n samples of the data open returns,
// stopping at the first error fn returns.
func EachSample(open func() (Reader, io.Closer, error), n int, fn func(*Sample) error) error {
	r, c, err := open()
	if err != nil {
		return err
	}
	defer c.Close()
	for range n {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(&s); err != nil {
			return err
		}
	}
	return nil
}

// FieldNames returns the sorted names of every field any of samples has.
func FieldNames(samples []Sample) []string {
	set := map[string]bool{}
	for _, s := range samples {
		for k := range s.Fields {
			set[k] = true
		}
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// Unmapped returns the first field of m (in the order id, input, expected,
// messages, tools) that is set but names none of names, as the mapping's key
// and the name it gives; ok is false when every set field is among names.
// Defaults are not checked: data may well lack an optional field. Nor is
// messages or tools named as its default: a sample may carry a conversation
// or tools, and most do not (the reference Evaluation of docs/concepts/evaluation.md lists them).
func (m Mapping) Unmapped(names []string) (key, name string, ok bool) {
	for _, f := range []struct{ key, name, optional string }{
		{"id", m.ID, ""}, {"input", m.Input, ""}, {"expected", m.Expected, ""},
		{"messages", m.Messages, DefaultMapping.Messages}, {"tools", m.Tools, DefaultMapping.Tools},
	} {
		if f.name != "" && f.name != f.optional && !slices.Contains(names, f.name) {
			return f.key, f.name, true
		}
	}
	return "", "", false
}

// QuoteNames lists names for an error message: "a", "b", "c".
func QuoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
