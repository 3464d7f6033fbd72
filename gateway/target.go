package gateway

// validRequestTarget reports whether a :path value can be forwarded as sent:
// "*" (OPTIONS, RFC 9110 §9.3.7), or a path starting with "/" without a
// space, "#" (a fragment is never sent, RFC 9110 §4.2.4) or a control byte,
// which no request-target may hold (RFC 9112 §3.2, RFC 3986 §2). Go's URL
// parser would otherwise escape them and the backend would see another path.
// Other bytes RFC 3986 leaves out but clients send unescaped in practice
// ("[", "]", "|", UTF-8) are allowed, as nginx and Envoy do.
func validRequestTarget(t string) bool {
	if t == "*" {
		return true
	}
	if t == "" || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c == '#' || c == 0x7f {
			return false
		}
	}
	return true
}
