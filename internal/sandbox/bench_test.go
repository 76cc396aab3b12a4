//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkConfinedWork is the sandbox's cost on an agent's work: a Go
// build (the package compiled and linked, the standard library cached) and a
// shell running 200 programs, each unconfined and confined (`make bench`).
func BenchmarkConfinedWork(b *testing.B) {
	src, cache := b.TempDir(), b.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n"), 0o644)
	work := map[string]string{
		"go-build":  `go build -o hello . && ./hello >/dev/null`,
		"200-execs": `i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done`,
	}
	warm := exec.Command("go", "build", "-o", "hello", ".")
	warm.Dir, warm.Env = src, append(os.Environ(), "GOCACHE="+cache, "GOTOOLCHAIN=local", "GOFLAGS=", "GOENV=off")
	if out, err := warm.CombinedOutput(); err != nil { // the cache, for every run alike
		b.Fatalf("%v\n%s", err, out)
	}
	for _, name := range []string{"go-build", "200-execs"} {
		for _, confined := range []bool{false, true} {
			label := name + "/unconfined"
			if confined {
				label = name + "/landlock"
			}
			b.Run(label, func(b *testing.B) {
				n := 0
				for b.Loop() {
					// A change each time: the package is compiled and
					// linked, the standard library comes from the cache.
					n++
					os.WriteFile(filepath.Join(src, "n.go"), []byte(fmt.Sprintf("package main\n\nconst n = %d\n", n)), 0o644)
					cmd := exec.Command("/bin/sh", "-c", work[name])
					cmd.Dir = src
					cmd.Env = append(os.Environ(), "GOCACHE="+cache, "TMPDIR="+cache, "GOTOOLCHAIN=local", "GOFLAGS=", "GOENV=off", "HOME="+cache)
					if confined {
						p := &Policy{RW: []string{src, cache}, RO: System, Devices: Devices, Isolated: CanIsolate()}
						if err := p.Wrap(cmd); err != nil {
							b.Fatal(err)
						}
					}
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("%v\n%s", err, out)
					}
				}
			})
		}
	}
}

// BenchmarkAgentBuildCache is what the executor's agent caches save
// (control/executor/agentcache.go): the same hello-world Go build, in a
// root and as a user of its own as a delegation's agent runs, with a
// cache dir lent to it idmapped, once empty each time (every delegation
// cold, as before the caches) and once kept (a delegator's next
// delegation). `make bench` runs it.
func BenchmarkAgentBuildCache(b *testing.B) {
	if !CanIsolate() {
		b.Skip("a root and a user of its own need root")
	}
	src := b.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n"), 0o644)
	const uid = 2_000_000_555
	os.Chown(src, uid, uid)
	os.Chown(filepath.Join(src, "go.mod"), uid, uid)
	os.Chown(filepath.Join(src, "main.go"), uid, uid)
	build := func(b *testing.B, cache string) {
		cmd := exec.Command("/bin/sh", "-c", `go build -o "$TMPDIR/hello" . && "$TMPDIR/hello" >/dev/null`)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOCACHE="+filepath.Join(cache, "go-build"), "TMPDIR="+cache, "HOME="+cache,
			"GOTOOLCHAIN=local", "GOFLAGS=", "GOENV=off")
		p := &Policy{RW: []string{src, cache}, RO: System, Devices: Devices, Isolated: true,
			User: &User{UID: uid, GID: uid, Home: cache}, Yours: []string{cache}}
		if err := p.Wrap(cmd); err != nil {
			b.Fatal(err)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			build(b, b.TempDir())
		}
	})
	b.Run("kept", func(b *testing.B) {
		kept := b.TempDir()
		build(b, kept) // the delegator's first delegation filled it
		for b.Loop() {
			build(b, kept)
		}
	})
}
