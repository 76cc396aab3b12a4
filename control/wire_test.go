package control

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAppendixRoundTrip decodes the examples of spec appendix A (and an
// sshfs START) and re-encodes them byte for byte.
func TestAppendixRoundTrip(t *testing.T) {
	tests := []struct {
		file string
		want any
	}{
		{"a_invite.json", &Invite{}},
		{"a_accept.json", &Accept{}},
		{"a_start.json", &Start{}},
		{"a_error_declined.json", &Error{}},
		{"a_error_too_large.json", &Error{}},
		{"sshfs_start.json", &Start{}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			msg, err := DecodeMessage(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got, want := typeName(msg), typeName(tt.want); got != want {
				t.Fatalf("decoded as %s, want %s", got, want)
			}
			compact, err := Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			json.Indent(&out, compact, "", "  ")
			if !bytes.Equal(out.Bytes(), bytes.TrimSpace(data)) {
				t.Fatalf("re-encoded differently:\n%s\nwant:\n%s", out.Bytes(), data)
			}
		})
	}
	t.Run("start response", func(t *testing.T) {
		data, _ := os.ReadFile("testdata/a_start_response.json")
		var r StartResponse
		if err := json.Unmarshal(data, &r); err != nil || !r.OK {
			t.Fatalf("%v %v", r, err)
		}
		out, _ := json.Marshal(r)
		if string(out) != `{"ok":true}` {
			t.Fatal(string(out))
		}
	})
	t.Run("events", func(t *testing.T) {
		data, _ := os.ReadFile("testdata/a_events.sse")
		var n int
		err := ReadSSE(bytes.NewReader(data), t.TempDir(), 0, func(_ uint64, payload []byte, result Spooled) (bool, error) {
			ev, err := DecodeEvent(payload)
			if err != nil {
				return false, err
			}
			out, _ := Marshal(ev)
			if ev.Type == EventDone {
				// resultBase64 went to a file as it was read; the fixture's
				// is cut short ("..."), so it is reported as not base64.
				if result.File == "" || result.Bad == nil {
					t.Errorf("done event: result %+v; want a file reported bad", result)
				}
				payload = bytes.Replace(payload, []byte(`,"resultBase64":""`), nil, 1)
			}
			if !bytes.Equal(out, payload) {
				t.Errorf("event re-encoded differently:\n%s\nwant:\n%s", out, payload)
			}
			n++
			return ev.Terminal(), nil
		})
		if err != nil || n != 2 {
			t.Fatalf("read %d events: %v", n, err)
		}
	})
}

func typeName(v any) string {
	switch v.(type) {
	case *Invite:
		return "INVITE"
	case *Accept:
		return "ACCEPT"
	case *Start:
		return "START"
	case *Error:
		return "ERROR"
	}
	return "?"
}

// mutate loads a fixture as a generic map, applies fn, and re-marshals it.
func mutate(t *testing.T, file string, fn func(m map[string]any)) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, _ := json.Marshal(m)
	return out
}

func sub(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

func TestDecodeRefusals(t *testing.T) {
	tests := []struct {
		name, file, field string
		fn                func(m map[string]any)
	}{
		{"missing version", "a_invite.json", "version", func(m map[string]any) { delete(m, "version") }},
		{"wrong version", "a_invite.json", "version", func(m map[string]any) { m["version"] = "2" }},
		{"numeric version", "a_invite.json", "version", func(m map[string]any) { m["version"] = 1 }},
		{"missing type", "a_invite.json", "type", func(m map[string]any) { delete(m, "type") }},
		{"unknown type", "a_invite.json", "type", func(m map[string]any) { m["type"] = "HELLO" }},
		{"DONE is not posted", "a_invite.json", "type", func(m map[string]any) { m["type"] = "DONE" }},
		{"missing id", "a_invite.json", "delegationId", func(m map[string]any) { delete(m, "delegationId") }},
		{"id with slash", "a_invite.json", "delegationId", func(m map[string]any) { m["delegationId"] = "dlg_../../etc" }},
		{"id dot-dot", "a_invite.json", "delegationId", func(m map[string]any) { m["delegationId"] = ".." }},
		{"id no prefix", "a_invite.json", "delegationId", func(m map[string]any) { m["delegationId"] = "abc" }},
		{"id bad uuid", "a_invite.json", "delegationId", func(m map[string]any) { m["delegationId"] = "3f2b8c1e-9a4d-4e7b-8c21-5d6e7f8a9b0" }},
		{"missing prompt", "a_invite.json", "task.prompt", func(m map[string]any) { delete(sub(m, "task"), "prompt") }},
		{"missing description", "a_invite.json", "task.description", func(m map[string]any) { delete(sub(m, "task"), "description") }},
		{"missing task", "a_invite.json", "task.description", func(m map[string]any) { delete(m, "task") }},
		{"missing ttl", "a_invite.json", "lease.ttlSeconds", func(m map[string]any) { delete(sub(m, "lease"), "ttlSeconds") }},
		{"string ttl", "a_invite.json", "lease.ttlSeconds", func(m map[string]any) { sub(m, "lease")["ttlSeconds"] = "1h" }},
		{"bad access", "a_invite.json", "lease.accessMode", func(m map[string]any) { sub(m, "lease")["accessMode"] = "wx" }},
		{"missing export name", "a_invite.json", "workspace.exportName", func(m map[string]any) { delete(m, "workspace") }},
		{"bad transport", "a_invite.json", "requirements.transport", func(m map[string]any) { sub(m, "requirements")["transport"] = "nfs" }},
		{"missing expiresAt", "a_start.json", "lease.expiresAt", func(m map[string]any) { delete(sub(m, "lease"), "expiresAt") }},
		{"bad expiresAt", "a_start.json", "lease.expiresAt", func(m map[string]any) { sub(m, "lease")["expiresAt"] = "tomorrow" }},
		{"missing workDir transport", "a_start.json", "workDir.transport", func(m map[string]any) { delete(sub(m, "workDir"), "transport") }},
		{"missing checksum", "a_start.json", "workDir.checksum", func(m map[string]any) { delete(sub(m, "workDir"), "checksum") }},
		{"missing archive", "a_start.json", "workDir.workspaceBase64", func(m map[string]any) { delete(sub(m, "workDir"), "workspaceBase64") }},
		{"missing endpoint", "sshfs_start.json", "workDir.endpoint", func(m map[string]any) { delete(sub(m, "workDir"), "endpoint") }},
		{"missing certificate", "sshfs_start.json", "workDir.credential.certificate", func(m map[string]any) {
			delete(sub(sub(m, "workDir"), "credential"), "certificate")
		}},
		{"bad port", "sshfs_start.json", "workDir.endpoint.port", func(m map[string]any) { sub(sub(m, "workDir"), "endpoint")["port"] = 0 }},
		{"missing work dir path", "a_accept.json", "executorWorkDir.path", func(m map[string]any) { delete(m, "executorWorkDir") }},
		{"unknown error code", "a_error_declined.json", "code", func(m map[string]any) { m["code"] = "OOPS" }},
		{"error without message", "a_error_declined.json", "message", func(m map[string]any) { delete(m, "message") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMessage(mutate(t, tt.file, tt.fn))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a FieldError", err)
			}
			if fe.Field != tt.field {
				t.Fatalf("field %q (%v), want %q", fe.Field, err, tt.field)
			}
		})
	}
	for _, body := range []string{"", "null", "[]", "{", "<html>"} {
		if _, err := DecodeMessage([]byte(body)); err == nil {
			t.Errorf("%q decoded", body)
		}
	}
}

func TestValidDelegationID(t *testing.T) {
	for id, want := range map[string]bool{
		"dlg_a1b2c3d4": true, "dlg_A-b_9": true, "3f2b8c1e-9a4d-4e7b-8c21-5d6e7f8a9b0c": true,
		"dlg_": false, "dlg_a/b": false, "dlg_a.b": false, "DLG_a": false, "": false,
		"dlg_" + strings.Repeat("a", 121): false, NewDelegationID(): true,
	} {
		if ValidDelegationID(id) != want {
			t.Errorf("ValidDelegationID(%q) = %v", id, !want)
		}
	}
}

// Events of a type this delegator does not know decode, so that the stream
// goes on past them; the permission extension is checked like the rest.
func TestDecodeEventExtensions(t *testing.T) {
	const id = "dlg_ext"
	tests := []struct {
		name, json, field string
	}{
		{name: "unknown type passes", json: `{"delegationId":"dlg_ext","type":"heartbeat","timestamp":"2026-01-01T00:00:00Z","extra":1}`},
		{name: "permission", json: `{"delegationId":"dlg_ext","type":"permission","timestamp":"2026-01-01T00:00:00Z","requestId":"perm-1","outcome":"pending","options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}`},
		{name: "permission without request", field: "requestId", json: `{"delegationId":"dlg_ext","type":"permission","timestamp":"2026-01-01T00:00:00Z","outcome":"pending"}`},
		{name: "permission without outcome", field: "outcome", json: `{"delegationId":"dlg_ext","type":"permission","timestamp":"2026-01-01T00:00:00Z","requestId":"perm-1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodeEvent([]byte(tt.json))
			var fe *FieldError
			if tt.field != "" {
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("want a FieldError on %s, got %v", tt.field, err)
				}
				return
			}
			if err != nil || ev.DelegationID != id || ev.Terminal() {
				t.Fatalf("decode: %+v %v", ev, err)
			}
		})
	}
}

// TestHeadDialectRoundTrip decodes the reference implementation's messages
// as captured (testdata/head: its head dialect, and the events its
// executor sent a seed INVITE) and re-encodes them byte for byte, apart
// from the captures' white space.
func TestHeadDialectRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		file, dialect string
	}{
		{"invite-head.json", DialectHead},
		{"invite-seed.json", DialectSeed},
		{"start-head.json", DialectHead},
		{"start-head-sshfs.json", DialectHead},
	} {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "head", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			msg, err := DecodeMessage(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			var dialect string
			switch m := msg.(type) {
			case *Invite:
				dialect = m.Dialect()
			case *Start:
				dialect = m.Dialect
			}
			if dialect != tt.dialect {
				t.Errorf("dialect %q, want %q", dialect, tt.dialect)
			}
			out, err := Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			json.Compact(&want, data)
			if !bytes.Equal(out, want.Bytes()) {
				t.Fatalf("re-encoded differently:\n%s\nwant:\n%s", out, want.Bytes())
			}
		})
	}
	for _, file := range []string{"sse-head.txt", "sse-seed.txt"} {
		t.Run(file, func(t *testing.T) {
			data, _ := os.ReadFile(filepath.Join("testdata", "head", file))
			var types []string
			err := ReadSSE(bytes.NewReader(data), t.TempDir(), 0, func(_ uint64, payload []byte, result Spooled) (bool, error) {
				ev, err := DecodeEvent(payload)
				if err != nil {
					return false, err
				}
				types = append(types, ev.Type)
				if ev.Type == EventSnapshot {
					// The snapshot went to a file as it was read: a ZIP of
					// the environment, a folder per resource.
					if result.Bad != nil {
						t.Fatalf("snapshot: %v", result.Bad)
					}
					got := zipNames(t, result.File)
					if !slices.Contains(got, "workspace/hello.txt") || !slices.Contains(got, "EXECUTOR_WAS_HERE.txt") {
						t.Errorf("snapshot holds %v", got)
					}
					payload = bytes.Replace(payload, []byte(`,"snapshotBase64":""`), nil, 1)
				}
				out, _ := Marshal(ev)
				if !bytes.Equal(out, payload) {
					t.Errorf("event re-encoded differently:\n%s\nwant:\n%s", out, payload)
				}
				return ev.Terminal(), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"sse-head.txt": {"status", "snapshot", "done"}, "sse-seed.txt": {"error"}}[file]
			if !slices.Equal(types, want) {
				t.Errorf("events %v, want %v", types, want)
			}
		})
	}
}

func zipNames(t *testing.T, file string) []string {
	t.Helper()
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	return names
}

func TestHeadInviteRefusals(t *testing.T) {
	for _, tt := range []struct {
		name, field string
		fn          func(m map[string]any)
	}{
		{"no workspace nor environment", "workspace.exportName", func(m map[string]any) { delete(m, "environment") }},
		{"no resources", "environment.resources", func(m map[string]any) { sub(m, "environment")["resources"] = []any{} }},
		{"resource climbs", "environment.resources[0].name", func(m map[string]any) { resource(m)["name"] = ".." }},
		{"resource with slash", "environment.resources[0].name", func(m map[string]any) { resource(m)["name"] = "a/b" }},
		{"hidden resource", "environment.resources[0].name", func(m map[string]any) { resource(m)["name"] = ".awcp" }},
		{"not fs", "environment.resources[0].type", func(m map[string]any) { resource(m)["type"] = "git" }},
		{"bad mode", "environment.resources[0].mode", func(m map[string]any) { resource(m)["mode"] = "rwx" }},
		{"named twice", "environment.resources[1].name", func(m map[string]any) {
			env := sub(m, "environment")
			env["resources"] = append(env["resources"].([]any), resource(m))
		}},
		{"negative retention", "retentionMs", func(m map[string]any) { m["retentionMs"] = -1 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMessage(mutate(t, "head/invite-head.json", tt.fn))
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("err %v, want one about %s", err, tt.field)
			}
		})
	}
	t.Run("both members in START", func(t *testing.T) {
		_, err := DecodeMessage(mutate(t, "head/start-head.json", func(m map[string]any) { m["workDir"] = m["transportHandle"] }))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "transportHandle" {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("START with neither", func(t *testing.T) {
		_, err := DecodeMessage(mutate(t, "head/start-head.json", func(m map[string]any) { delete(m, "transportHandle") }))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "workDir.transport" {
			t.Fatalf("err %v", err)
		}
	})
}

func resource(m map[string]any) map[string]any {
	return sub(m, "environment")["resources"].([]any)[0].(map[string]any)
}
