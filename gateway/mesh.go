package gateway

import (
	"net/http"
	"strings"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
)

// Mesh listeners (ListenerConfig.Mesh): the handshake is the ingress's
// (mesh.Inbound.ServerTLS: leaf, client certificate, L4 intentions); every
// request is authorized here, before routing, by the current intentions.

// setListenerMesh publishes the mesh listeners now running, and points
// their Inbounds' outcomes at the gateway's metrics
// (impulse_connect_authorizations{result,source}).
func (g *Gateway) setListenerMesh(lcs []ListenerConfig) {
	m := map[string]*mesh.Inbound{}
	for _, lc := range lcs {
		if lc.Mesh != nil {
			m[lc.Name] = lc.Mesh
			lc.Mesh.SetObserver(g.obs.Metrics.ConnectAuthorization)
		}
	}
	g.meshes.Store(&m)
}

// meshFor is the Inbound of listener, nil when it is not a mesh listener.
func (g *Gateway) meshFor(listener string) *mesh.Inbound {
	if m := g.meshes.Load(); m != nil {
		return (*m)[listener]
	}
	return nil
}

// authorizeMesh decides r on a mesh listener by the peer's identity and
// the intentions (L4 and L7; mesh.Inbound.Authorize), matching the path
// in mesh.RequestPath's form (the gateway's normalisation with slashes
// merged: "//admin" and "/a/../admin" are decided as "/admin"). A denied
// request gets 403 intention_denied and false. Other listeners: true.
func (g *Gateway) authorizeMesh(rec *recorder, w http.ResponseWriter, r *http.Request, listener string) bool {
	in := g.meshFor(listener)
	if in == nil {
		return true
	}
	raw := r.RequestURI
	switch i := strings.IndexByte(raw, '?'); {
	case raw == "":
		raw = r.URL.EscapedPath()
	case i >= 0:
		raw = raw[:i]
	}
	path := raw
	if raw != "*" {
		var err error
		if path, err = mesh.RequestPath(raw, *g.paths.Load()); err != nil {
			rec.finish(w, nil, nil, answer.InvalidPath)
			return false
		}
	}
	src, d := in.Authorize(r.TLS, r.Method, r.Host, path, r.Header)
	if !d.Allow {
		g.log.Debug("request denied by intentions", "listener", listener, "source", src.String(), "path", path,
			"intention", d.Intention, "by", d.By.String())
		rec.finish(w, nil, nil, answer.IntentionDenied)
		return false
	}
	return true
}

// sampleMesh sets impulse_connect_leaf_expiry_seconds{service} of each
// mesh identity that has a leaf.
func (g *Gateway) sampleMesh(now time.Time) {
	m := g.meshes.Load()
	if m == nil {
		return
	}
	for _, in := range *m {
		if c := in.Leaf(); c != nil && c.Leaf != nil {
			g.obs.Metrics.ConnectLeafExpiry(in.Service(), c.Leaf.NotAfter.Sub(now).Seconds())
		}
	}
}
