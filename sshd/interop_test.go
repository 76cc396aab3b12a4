package sshd

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// openSSHFiles writes an issued credential the way OpenSSH clients read it:
// key, key-cert.pub, and a known_hosts pinning our host key.
func openSSHFiles(t *testing.T, f *fixture, cred *Credential) (key, knownHosts, host, port string) {
	t.Helper()
	dir := t.TempDir()
	key = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, []byte(cred.PrivateKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key+"-cert.pub", []byte(cred.Certificate), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ = net.SplitHostPort(f.addr)
	knownHosts = filepath.Join(dir, "known_hosts")
	line := "[" + host + "]:" + port + " " + f.auth.HostPublicKey()
	if err := os.WriteFile(knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, knownHosts, host, port
}

func sshOptions(key, knownHosts string) []string {
	return []string{
		"-i", key, "-o", "CertificateFile=" + key + "-cert.pub",
		"-o", "UserKnownHostsFile=" + knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		"-F", "/dev/null",
	}
}

// need fails the test when a tool .ci/run installs is missing: these tests
// must run in CI, never be skipped there.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs it from Debian's packages): %v", tool, err)
		}
	}
}

func TestOpenSSHSftpClient(t *testing.T) {
	need(t, "sftp", "ssh")
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_interop", false)
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the delegator\n"), 0o644)
	key, kh, host, port := openSSHFiles(t, f, cred)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "up.txt"), []byte("uploaded\n"), 0o644)

	batch := strings.Join([]string{
		"ls -l",
		"get hello.txt " + filepath.Join(local, "got.txt"),
		"put " + filepath.Join(local, "up.txt") + " up.txt",
		"mkdir sub",
		"rename up.txt sub/moved.txt",
		"chmod 600 sub/moved.txt",
		"symlink hello.txt link",
		"rm hello.txt",
		"df -h",
	}, "\n")
	args := append(sshOptions(key, kh), "-P", port, "-b", "-", "dlg_interop@"+host)
	cmd := exec.Command("sftp", args...)
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "got.txt")); string(b) != "from the delegator\n" {
		t.Fatalf("get: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/moved.txt")); string(b) != "uploaded\n" {
		t.Fatalf("put+rename: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/moved.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("chmod: %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "hello.txt")); !os.IsNotExist(err) {
		t.Fatal("rm did not remove")
	}
	if target, _ := os.Readlink(filepath.Join(dir, "link")); target != "hello.txt" {
		t.Fatalf("symlink: %q", target)
	}

	// A command with the same certificate is refused, and runs nothing.
	marker := filepath.Join(t.TempDir(), "ran")
	ssh := exec.Command("ssh", append(sshOptions(key, kh), "-p", port, "dlg_interop@"+host, "touch "+marker)...)
	sshOut, err := ssh.CombinedOutput()
	if err == nil {
		t.Fatalf("ssh command accepted:\n%s", sshOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
}

// mountSSHFS mounts remote, a path on the server of delegation id, with
// Debian's sshfs and extra options appended to ours; the mount is lazily
// unmounted when the test ends.
func mountSSHFS(t *testing.T, f *fixture, id string, cred *Credential, remote, extra string) string {
	t.Helper()
	need(t, "sshfs", "fusermount3")
	key, kh, host, port := openSSHFiles(t, f, cred)
	mnt := t.TempDir()
	opts := "IdentityFile=" + key + ",CertificateFile=" + key + "-cert.pub,UserKnownHostsFile=" + kh +
		",StrictHostKeyChecking=yes,IdentitiesOnly=yes,BatchMode=yes,port=" + port + extra
	out, err := exec.Command("sshfs", "-o", opts, id+"@"+host+":"+remote, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("sshfs: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("fusermount3", "-u", "-z", mnt).Run() })
	return mnt
}

func TestDebianSSHFS(t *testing.T) {
	need(t, "sshfs", "fusermount3")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("no /dev/fuse: %v", err)
	}
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_sshfs", false)
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644)
	mnt := mountSSHFS(t, f, "dlg_sshfs", cred, "/", "")
	if b, err := os.ReadFile(filepath.Join(mnt, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("read through sshfs: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new.txt"), []byte("via sshfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); !bytes.Equal(b, []byte("via sshfs\n")) {
		t.Fatalf("write through sshfs: %q", b)
	}
	if err := exec.Command("fusermount3", "-u", mnt).Run(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
}

// START names the export awcp/<id> (exportLocator): OpenSSH's sftp can cd
// there, and list and fetch through it, as well as through ".".
func TestOpenSSHSftpClientUsesLocator(t *testing.T) {
	need(t, "sftp", "ssh")
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_locator", false)
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("through the locator\n"), 0o644)
	key, kh, host, port := openSSHFiles(t, f, cred)
	local := t.TempDir()
	batch := strings.Join([]string{
		"cd " + Locator("dlg_locator"),
		"pwd",
		"ls",
		"get hello.txt " + filepath.Join(local, "got.txt"),
		"ls " + Locator("dlg_locator") + "/hello.txt",
	}, "\n")
	args := append(sshOptions(key, kh), "-P", port, "-b", "-", "dlg_locator@"+host)
	cmd := exec.Command("sftp", args...)
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "got.txt")); string(b) != "through the locator\n" {
		t.Fatalf("got %q through the locator\n%s", b, out)
	}
}

// A head executor (the reference's later dialect) mounts START's
// exportLocator with Debian's sshfs, as the reference does (its options
// but noappledouble, which Linux's sshfs refuses), and runs its agent in
// the resource folder: the environment root lists the export as workspace/
// and holds nothing else, and nothing can be made beside it.
func TestSSHFSMountsEnvironmentRoot(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_env", false)
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644)
	mnt := mountSSHFS(t, f, "dlg_env", cred, "/"+EnvLocator("dlg_env")+"/",
		",reconnect,ServerAliveInterval=15,ServerAliveCountMax=3,follow_symlinks")

	ents, err := os.ReadDir(mnt)
	if err != nil || len(ents) != 1 || ents[0].Name() != EnvResource || !ents[0].IsDir() {
		t.Fatalf("environment root lists %v (%v), want only %s/", ents, err, EnvResource)
	}
	ws := filepath.Join(mnt, EnvResource)
	if b, err := os.ReadFile(filepath.Join(ws, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("read through the resource: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "new.txt"), []byte("via env\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "via env\n" {
		t.Fatalf("write through the resource: %q", b)
	}
	for name, try := range map[string]func() error{
		"create beside the resource": func() error { return os.WriteFile(filepath.Join(mnt, "x.txt"), []byte("x"), 0o644) },
		"mkdir beside the resource":  func() error { return os.Mkdir(filepath.Join(mnt, "d"), 0o755) },
		"move the resource":          func() error { return os.Rename(ws, filepath.Join(mnt, "moved")) },
		"remove the resource":        func() error { return os.Remove(ws) },
		"move a file out":            func() error { return os.Rename(filepath.Join(ws, "new.txt"), filepath.Join(mnt, "new.txt")) },
	} {
		if err := try(); err == nil {
			t.Errorf("%s: allowed", name)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "other")); !os.IsNotExist(err) {
		t.Errorf("a name beside the resource: %v, want not found", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the export holds %v after the refused requests, want hello.txt and new.txt", ents)
	}
	if err := exec.Command("fusermount3", "-u", mnt).Run(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
}
