// Package headers holds a route's header rules (request_headers,
// response_headers): set, add and remove, with values that may use a
// fixed set of variables (edgerules.HeaderVariables). Compiled once per
// config; applying them to a header map is a pure function of the map and
// the request's Vars (README "Header rules").
package headers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

// Config is one header block. Names are field names (any case; "_" is
// judged as "-" by edgerules.CheckHeaderRuleName); values field values
// with "{variable}"s (edgerules.ParseHeaderValue).
type Config struct {
	// Set replaces the field's values with the one given.
	Set map[string]string
	// Add appends a value, after any the field has.
	Add map[string]string
	// Remove deletes the fields.
	Remove []string
}

// Vars are the values of a request's variables; a zero field is "".
type Vars struct {
	ClientIP, RequestID, Host, Scheme, Route string
}

// Rules are a compiled Config: applied in the order remove, set, add (as
// Envoy's request_headers_to_remove precede its _to_add), each list
// sorted by field name, so the result never depends on map order.
type Rules struct {
	remove []string
	set    []op
	add    []op
}

// op is one set or add: the canonical field name and its value.
type op struct {
	name  string
	value value
}

// value is a compiled value: fixed (a ready slice of one, shared by every
// request: never modified) or parts with variables.
type value struct {
	fixed []string
	parts []edgerules.ValuePart
}

// New compiles c for the request (request true) or the response. nil, nil
// when c is empty. Errors name the field: a name or value edgerules
// refuses, or a field both removed and set or added.
func New(c Config, request bool) (*Rules, error) {
	if len(c.Set) == 0 && len(c.Add) == 0 && len(c.Remove) == 0 {
		return nil, nil
	}
	r := &Rules{}
	for _, n := range c.Remove {
		if why := edgerules.CheckHeaderRuleName(n, request); why != "" {
			return nil, fmt.Errorf("headers: remove: %s", why)
		}
		r.remove = append(r.remove, http.CanonicalHeaderKey(n))
	}
	slices.Sort(r.remove)
	var err error
	if r.set, err = compile("set", c.Set, request); err != nil {
		return nil, err
	}
	if r.add, err = compile("add", c.Add, request); err != nil {
		return nil, err
	}
	return r, nil
}

func compile(what string, m map[string]string, request bool) ([]op, error) {
	var out []op
	for n, v := range m {
		if why := edgerules.CheckHeaderRuleName(n, request); why != "" {
			return nil, fmt.Errorf("headers: %s: %s", what, why)
		}
		parts, why := edgerules.ParseHeaderValue(v)
		if why != "" {
			return nil, fmt.Errorf("headers: %s %q: %s", what, n, why)
		}
		o := op{name: http.CanonicalHeaderKey(n)}
		if len(parts) == 1 && parts[0].Var == "" {
			o.value.fixed = []string{parts[0].Text}
		} else {
			o.value.parts = parts
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b op) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// Apply changes h by the rules, with v's values for variables (v is read
// only when a value has one). A fixed value costs no allocation for set;
// a value with variables costs one string and one slice.
func (r *Rules) Apply(h http.Header, v *Vars) {
	for _, n := range r.remove {
		delete(h, n)
	}
	for i := range r.set {
		o := &r.set[i]
		if o.value.fixed != nil {
			h[o.name] = o.value.fixed
		} else {
			h[o.name] = []string{o.value.render(v)}
		}
	}
	for i := range r.add {
		o := &r.add[i]
		var s string
		if o.value.fixed != nil {
			s = o.value.fixed[0]
		} else {
			s = o.value.render(v)
		}
		prior := h[o.name]
		// A new slice: prior may be shared with another map (the
		// backend request's copy of the client's fields).
		vals := make([]string, len(prior), len(prior)+1)
		copy(vals, prior)
		h[o.name] = append(vals, s)
	}
}

// render is the value with v's values for its variables. A variable's
// value that is not a valid field value (it never is: each comes from a
// validated field or address) is left out.
func (x *value) render(v *Vars) string {
	var b strings.Builder
	for _, p := range x.parts {
		if p.Var == "" {
			b.WriteString(p.Text)
			continue
		}
		s := varValue(p.Var, v)
		if validValue(s) {
			b.WriteString(s)
		}
	}
	return b.String()
}

func varValue(name string, v *Vars) string {
	switch name {
	case "client_ip":
		return v.ClientIP
	case "request_id":
		return v.RequestID
	case "host":
		return v.Host
	case "scheme":
		return v.Scheme
	case "route":
		return v.Route
	}
	return ""
}

// validValue: no CR, LF, NUL or other control byte but tab.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
