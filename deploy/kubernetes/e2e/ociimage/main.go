// Command ociimage writes a directory tree as a one-layer OCI image archive,
// for `ctr images import`: the test cluster has no registry and no image
// builder, and its images (the sandbox's pause, the executor) are a few
// static programs and files.
//
//	ociimage -o awcp-fs.tar -name awcp-fs:e2e -entrypoint /usr/local/bin/awcp-fs ROOTFS
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "the archive to write")
	name := flag.String("name", "", "the image's reference, NAME:TAG (docker.io/library/ is added to a bare name, as the kubelet does)")
	entrypoint := flag.String("entrypoint", "", "the entrypoint, comma-separated")
	flag.Parse()
	if *out == "" || *name == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: ociimage -o OUT.tar -name NAME:TAG [-entrypoint PATH] ROOTFS")
		os.Exit(2)
	}
	if err := write(*out, fullName(*name), *entrypoint, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// fullName is ref as the kubelet resolves an image name without a registry.
func fullName(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost"):
		return ref
	case hasSlash:
		return "docker.io/" + ref
	default:
		return "docker.io/library/" + ref
	}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func write(out, ref, entrypoint, rootfs string) error {
	layer, err := tarTree(rootfs)
	if err != nil {
		return err
	}
	var entry []string
	if entrypoint != "" {
		entry = strings.Split(entrypoint, ",")
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": time.Now().UTC().Format(time.RFC3339),
		"config": map[string]any{"Entrypoint": entry, "Env": []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer), "size": len(layer)}},
	})
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
		}},
	})

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	err = errors.Join(
		put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		put("index.json", index),
		put("blobs/sha256/"+digest(layer)[7:], layer),
		put("blobs/sha256/"+digest(config)[7:], config),
		put("blobs/sha256/"+digest(manifest)[7:], manifest),
		tw.Close(),
	)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
	}
	return err
}

// tarTree is the layer: rootfs's files, directories and symlinks, owned
// by root, modes kept.
func tarTree(rootfs string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(rootfs, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = rel, 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
