package balance

// MaxSkip is how many candidates a Skip holds: more than the tries of one
// request (retry.MaxAttempts + retry.MaxHedges).
const MaxSkip = 16

// Skip is a small set of candidate indices a pick passes over, as if they
// were ineligible: the backends a request already tried, so that its retry
// goes elsewhere (the caller picks again without it when nothing else is
// eligible). The zero value skips nothing; it is a value of fixed size, so a
// pick with it never allocates. Indices past the first MaxSkip added are
// not kept (Add reports it).
type Skip struct {
	n   int
	idx [MaxSkip]int32
}

// Add puts candidate index i in the set; false when the set is full.
func (s *Skip) Add(i int) bool {
	if s.n == MaxSkip {
		return false
	}
	s.idx[s.n] = int32(i)
	s.n++
	return true
}

// Len is the number of indices in the set.
func (s *Skip) Len() int { return s.n }

// Has reports whether index i is in the set: a loop over at most MaxSkip
// entries, none for the zero value.
func (s *Skip) Has(i int) bool {
	for k := range s.n {
		if int(s.idx[k]) == i {
			return true
		}
	}
	return false
}

// usable is c[i] as a pick sees it: eligible and not skipped.
func usable(c []Candidate, i int, skip *Skip) bool {
	return c[i].Eligible() && (skip.n == 0 || !skip.Has(i))
}
