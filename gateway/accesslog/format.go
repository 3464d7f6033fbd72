package accesslog

import (
	"net"
	"strconv"
	"unicode/utf8"
)

// appendJSON appends e as one JSON object and a newline. Keys are always
// present except query (only with includeQuery), upstream_path (only
// when a route rewrote the path), client_cert_subject
// (only for a verified certificate), grpc_status (only for gRPC), auth
// and auth_subject (only on a route with authentication; auth_subject only
// for a request it let in as a named user or key).
func appendJSON(b []byte, e *Entry, includeQuery bool) []byte {
	b = append(b, `{"time":"`...)
	b = e.Start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, '"')
	b = appendField(b, "request_id", e.RequestID)
	b = appendField(b, "trace_id", e.TraceID)
	b = appendField(b, "listener", e.Listener)
	b = appendField(b, "protocol", e.Protocol)
	b = appendField(b, "client_address", e.ClientAddress)
	b = appendField(b, "peer", e.Peer)
	b = appendField(b, "tls_sni", e.SNI)
	if e.ClientCert != nil {
		b = appendField(b, "client_cert_subject", e.ClientCert.Subject.String())
	}
	b = appendField(b, "method", e.Method)
	b = appendField(b, "host", e.Host)
	b = appendField(b, "path", e.Path)
	if e.UpstreamPath != "" {
		b = appendField(b, "upstream_path", e.UpstreamPath)
	}
	if includeQuery {
		b = appendField(b, "query", e.Query)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = appendField(b, "reason", e.Reason)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', -1, 64)
	b = appendField(b, "upstream", e.Upstream)
	b = appendField(b, "backend", e.Backend)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = appendField(b, "user_agent", e.UserAgent)
	if e.GRPCStatus != "" {
		b = appendField(b, "grpc_status", e.GRPCStatus)
	}
	if e.Auth != "" {
		b = appendField(b, "auth", e.Auth)
		if e.AuthSubject != "" {
			b = appendField(b, "auth_subject", e.AuthSubject)
		}
	}
	return append(b, "}\n"...)
}

// appendField appends `,"key":"value"`.
func appendField(b []byte, key, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendJSONString(b, value)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string (RFC 8259 §7): quotes,
// backslashes and control characters escaped, invalid UTF-8 replaced by
// U+FFFD, as encoding/json does; U+2028 and U+2029 escaped too, so a line
// is also valid JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCombined appends e in the NCSA combined log format (Apache's
// `%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"`): the client's
// IP, no identity or user ("-"), the arrival time, the request line (the
// query only with includeQuery), the status, the response body bytes ("-"
// for none), the referer and the user agent. Quoted values escape `"`,
// `\`, control and non-ASCII bytes as \xhh, as Apache does.
func appendCombined(b []byte, e *Entry, includeQuery bool) []byte {
	host := e.ClientAddress
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	b = appendEscapedOrDash(b, host)
	b = append(b, " - - ["...)
	b = e.Start.UTC().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendEscaped(b, e.Method)
	b = append(b, ' ')
	b = appendEscaped(b, e.Path)
	if includeQuery && e.Query != "" {
		b = append(b, '?')
		b = appendEscaped(b, e.Query)
	}
	b = append(b, ' ')
	b = appendEscaped(b, e.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	if e.BytesOut > 0 {
		b = strconv.AppendInt(b, e.BytesOut, 10)
	} else {
		b = append(b, '-')
	}
	b = append(b, ` "`...)
	b = appendEscapedOrDash(b, e.Referer)
	b = append(b, `" "`...)
	b = appendEscapedOrDash(b, e.UserAgent)
	return append(b, "\"\n"...)
}

func appendEscapedOrDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return appendEscaped(b, s)
}

// appendEscaped appends s with `"` and `\` backslash-escaped and bytes
// outside printable ASCII as \xhh (Apache's ap_escape_logitem).
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}
