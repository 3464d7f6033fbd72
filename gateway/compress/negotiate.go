// Package compress is the response compression stage of the pipeline
// (README "Compression"): a route's Policy decides, from the request's
// Accept-Encoding and the response's status and fields, whether and how a
// backend's response is encoded (Policy.Decide, a pure function), and
// Writer streams the body through a pooled encoder. Codings: zstd
// (RFC 8878), br (RFC 7932) and gzip (RFC 1952), with
// github.com/klauspost/compress and github.com/andybalholm/brotli.
package compress

// Coding is a content coding the gateway can apply (RFC 9110 §8.4.1).
type Coding uint8

// The codings, and None: the response is passed as it is.
const (
	None Coding = iota
	Zstd
	Brotli
	Gzip
	numCodings
)

// String is the coding's name in Content-Encoding and in the configuration.
func (c Coding) String() string {
	switch c {
	case Zstd:
		return "zstd"
	case Brotli:
		return "br"
	case Gzip:
		return "gzip"
	}
	return "identity"
}

// ParseCoding is the Coding named name ("zstd", "br" or "gzip", as
// written in algorithms); false for any other.
func ParseCoding(name string) (Coding, bool) {
	switch name {
	case "zstd":
		return Zstd, true
	case "br":
		return Brotli, true
	case "gzip":
		return Gzip, true
	}
	return None, false
}

// qUnset marks a coding the Accept-Encoding field does not list.
const qUnset = -1

// acceptance is what an Accept-Encoding field says: the weight of each
// coding, of identity and of "*", in thousandths (0..1000), or qUnset.
type acceptance struct {
	q        [numCodings]int16
	identity int16
	star     int16
}

// parseAccept reads the Accept-Encoding field values (RFC 9110 §12.5.3):
//
//	Accept-Encoding = #( codings [ weight ] )
//	codings = content-coding / "identity" / "*"
//	weight  = OWS ";" OWS "q=" qvalue
//
// Names are case-insensitive, "x-gzip" is gzip (RFC 9110 §8.4.1.3). The
// first entry of a name counts; an entry with a malformed qvalue is
// ignored, as are parameters other than q and codings the gateway does not
// apply. It never allocates.
func parseAccept(values []string) acceptance {
	a := acceptance{identity: qUnset, star: qUnset}
	for i := range a.q {
		a.q[i] = qUnset
	}
	for _, v := range values {
		for len(v) > 0 {
			var elem string
			if i := indexByte(v, ','); i >= 0 {
				elem, v = v[:i], v[i+1:]
			} else {
				elem, v = v, ""
			}
			name, params := elem, ""
			if i := indexByte(elem, ';'); i >= 0 {
				name, params = elem[:i], elem[i+1:]
			}
			name = trimOWS(name)
			if name == "" {
				continue
			}
			q, ok := weight(params)
			if !ok {
				continue
			}
			var slot *int16
			switch {
			case equalFold(name, "zstd"):
				slot = &a.q[Zstd]
			case equalFold(name, "br"):
				slot = &a.q[Brotli]
			case equalFold(name, "gzip"), equalFold(name, "x-gzip"):
				slot = &a.q[Gzip]
			case equalFold(name, "identity"):
				slot = &a.identity
			case name == "*":
				slot = &a.star
			default:
				continue
			}
			if *slot == qUnset {
				*slot = q
			}
		}
	}
	return a
}

// weight reads the parameters after a coding's ";": the q parameter's
// qvalue in thousandths (1000 when absent); false when a q parameter is
// malformed. Other parameters are skipped.
func weight(params string) (int16, bool) {
	q := int16(1000)
	for len(params) > 0 {
		var p string
		if i := indexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, ""
		}
		p = trimOWS(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		v, ok := qvalue(p[2:])
		if !ok {
			return 0, false
		}
		q = v
	}
	return q, true
}

// qvalue parses RFC 9110 §12.4.2's qvalue = ( "0" [ "." 0*3DIGIT ] ) /
// ( "1" [ "." 0*3("0") ] ) into thousandths.
func qvalue(s string) (int16, bool) {
	if len(s) == 0 || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	n := int16(s[0]-'0') * 1000
	if len(s) == 1 {
		return n, true
	}
	if s[1] != '.' {
		return 0, false
	}
	scale := int16(100)
	for _, c := range []byte(s[2:]) {
		if c < '0' || c > '9' || (s[0] == '1' && c != '0') {
			return 0, false
		}
		n += int16(c-'0') * scale
		scale /= 10
	}
	return n, true
}

// Negotiate picks the coding for a response from offered (the route's
// algorithms, in its order of preference) and the request's Accept-Encoding
// values (nil: the field is absent). The highest weight wins; equal
// weights go to the earlier of offered. A coding the field does not name
// is acceptable with the weight of "*" when there is one, and not at all
// otherwise (q=0: never). None when nothing offered is acceptable, when
// the field is absent (the gateway never encodes for a client that did not
// ask), or when the field weighs identity (by name or through "*") above
// the best coding. identityRefused reports "identity;q=0", or "*;q=0"
// without an identity entry (RFC 9110 §12.5.3): the client will not take
// the response as it is.
func Negotiate(values []string, offered []Coding) (c Coding, identityRefused bool) {
	if values == nil {
		return None, false
	}
	a := parseAccept(values)
	identity := a.identity
	if identity == qUnset {
		identity = a.star
	}
	best, bestQ := None, int16(0)
	for _, o := range offered {
		if o == None || o >= numCodings {
			continue
		}
		q := a.q[o]
		if q == qUnset {
			q = a.star
		}
		if q > bestQ {
			best, bestQ = o, q
		}
	}
	if best != None && identity > bestQ {
		best = None
	}
	return best, identity == 0
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// trimOWS trims RFC 9110 §5.6.3 optional whitespace (SP, HTAB).
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// equalFold compares s with the lower-case ASCII word lower, ignoring
// ASCII case only.
func equalFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
