// Package xconnect turns on extended CONNECT (RFC 8441) in Go's HTTP/2
// server, which announces SETTINGS_ENABLE_CONNECT_PROTOCOL only when
// GODEBUG holds http2xconnect=1 as net/http and x/net/http2 initialize
// (golang/go#71128 keeps it off by default). The gateway translates
// WebSocket over HTTP/2 to an HTTP/1.1 upgrade (gateway/tunnel), so it
// can announce it.
//
// The setting is read once, in those packages' init functions: this package
// must be initialized before them. It imports only os and strings, and Go initializes
// packages in import-path order among those whose imports are ready (the Go
// spec, "Package initialization", since Go 1.21), so any "github.com/..."
// path comes before "golang.org/x/net/http2" and "net/http". A blank import
// of this package from any package of the binary is enough.
package xconnect

import (
	"os"
	"strings"
)

// Setting is the GODEBUG entry this package adds.
const Setting = "http2xconnect=1"

func init() {
	v := os.Getenv("GODEBUG")
	switch {
	case v == "":
		v = Setting
	case containsSetting(v, "http2xconnect"):
		return // an operator's explicit choice stays
	default:
		v += "," + Setting
	}
	_ = os.Setenv("GODEBUG", v)
}

// containsSetting reports whether the GODEBUG list v sets key.
func containsSetting(v, key string) bool {
	for item := range strings.SplitSeq(v, ",") {
		if k, _, ok := strings.Cut(item, "="); ok && strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}
