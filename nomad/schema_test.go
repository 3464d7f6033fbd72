package nomad

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// blockSchema is the part of Nomad's job specification the examples use:
// the arguments and nested blocks a block accepts (any: a map block such as
// meta, env or options, whose argument names are free). Nomad's own parser
// is not importable (its module is not served), so a misspelt or misplaced
// argument — a task-level shutdown_delay meant for group services, say —
// would otherwise only show when a cluster refuses or ignores it.
type blockSchema struct {
	attrs  []string
	blocks []string
	any    bool
}

// jobSchema is keyed by the block's type path ("job/group/task"). Sources:
// developer.hashicorp.com/nomad/docs/job-specification (job, group, network,
// port, service, check, task, artifact, template, resources, lifecycle) and
// /nomad/docs/job-declare/task-driver/exec (config).
var jobSchema = map[string]blockSchema{
	"":         {blocks: []string{"variable", "job"}},
	"variable": {attrs: []string{"type", "default", "description", "sensitive"}},
	"job": {attrs: []string{"type", "datacenters", "node_pool", "namespace", "region", "priority", "all_at_once"},
		blocks: []string{"group", "constraint", "affinity", "update", "meta", "spread"}},
	"job/group": {attrs: []string{"count", "shutdown_delay", "stop_after_client_disconnect", "max_client_disconnect"},
		blocks: []string{"network", "service", "task", "restart", "reschedule", "update", "ephemeral_disk", "constraint", "meta", "consul", "disconnect"}},
	"job/group/network":              {attrs: []string{"mode", "hostname"}, blocks: []string{"port", "dns"}},
	"job/group/network/port":         {attrs: []string{"static", "to", "host_network"}},
	"job/group/service":              {attrs: []string{"name", "port", "provider", "tags", "canary_tags", "address_mode", "task", "enable_tag_override"}, blocks: []string{"check", "meta", "check_restart", "identity"}},
	"job/group/service/meta":         {any: true},
	"job/group/service/check":        {attrs: []string{"name", "type", "port", "path", "interval", "timeout", "method", "protocol", "address_mode", "tls_skip_verify", "expose", "initial_status", "success_before_passing", "failures_before_critical"}, blocks: []string{"header", "check_restart"}},
	"job/group/service/check/header": {any: true},
	"job/group/task":                 {attrs: []string{"driver", "user", "kill_signal", "kill_timeout", "shutdown_delay", "leader", "kind"}, blocks: []string{"config", "artifact", "template", "resources", "lifecycle", "env", "service", "logs", "restart", "identity", "consul", "vault", "meta"}},
	// config: the exec driver, the only one the examples use.
	"job/group/task/config":           {attrs: []string{"command", "args", "pid_mode", "ipc_mode", "cap_add", "cap_drop"}},
	"job/group/task/artifact":         {attrs: []string{"source", "destination", "mode", "chown"}, blocks: []string{"options", "headers"}},
	"job/group/task/artifact/options": {any: true},
	"job/group/task/template":         {attrs: []string{"destination", "data", "source", "change_mode", "change_signal", "perms", "uid", "gid", "left_delimiter", "right_delimiter", "env", "splay", "error_on_missing_key"}, blocks: []string{"wait", "change_script"}},
	"job/group/task/resources":        {attrs: []string{"cpu", "cores", "memory", "memory_max"}},
	"job/group/task/lifecycle":        {attrs: []string{"hook", "sidecar"}},
	"job/group/task/env":              {any: true},
	"job/group/task/meta":             {any: true},
	"job/group/meta":                  {any: true},
	"job/meta":                        {any: true},
	"job/group/service/check_restart": {attrs: []string{"limit", "grace", "ignore_warnings"}},
	"job/group/task/logs":             {attrs: []string{"max_files", "max_file_size", "disabled"}},
	"job/group/task/identity":         {attrs: []string{"name", "aud", "env", "file", "ttl", "change_mode", "change_signal"}},
	"job/group/network/dns":           {attrs: []string{"servers", "searches", "options"}},
	"job/group/task/artifact/headers": {any: true},
}

// checkSchema reports every argument and block of body (at type path p)
// that jobSchema does not know.
func checkSchema(t *testing.T, body *hclsyntax.Body, p string) {
	t.Helper()
	s, ok := jobSchema[p]
	if !ok {
		t.Errorf("%s: block %q is not in this test's job schema", body.SrcRange, p)
		return
	}
	if s.any {
		return
	}
	for name, a := range body.Attributes {
		if !slices.Contains(s.attrs, name) {
			t.Errorf("%s: %q is not an argument of %s", a.NameRange, name, label(p))
		}
	}
	for _, b := range body.Blocks {
		if !slices.Contains(s.blocks, b.Type) {
			t.Errorf("%s: %q is not a block of %s", b.TypeRange, b.Type, label(p))
			continue
		}
		checkSchema(t, b.Body, strings.TrimPrefix(p+"/"+b.Type, "/"))
	}
}

func label(p string) string {
	if p == "" {
		return "a job file"
	}
	return strings.ReplaceAll(p, "/", " → ")
}
