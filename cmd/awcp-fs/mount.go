package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	awcpfs "github.com/awcp/awcp/fs"
)

func mountCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount a delegation by hand from a START message (or its workDir), in the foreground",
		ArgsUsage: "MOUNTPOINT",
		Flags: append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "start", Required: true, Usage: "file with the START message or its workDir (- for stdin)"},
			&cli.BoolFlag{Name: "ro", Usage: "mount read-only whatever START says"},
			&cli.BoolFlag{Name: "debug", Usage: "log every FUSE request"},
			knownHostsFlag, insecureHostKeyFlag,
		),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("mount takes exactly one MOUNTPOINT")
			}
			log, err := clikit.Logger(c, c.App.ErrWriter)
			if err != nil {
				return err
			}
			info, expires, ro, err := readStart(c.String("start"))
			if err != nil {
				return err
			}
			mp := c.Args().First()
			tr := &executor.SSHFSExecutor{Logger: log, KnownHosts: c.String("known-hosts"),
				InsecureAcceptHostKey: c.Bool("insecure-accept-host-key")}
			m, err := tr.Mount(control.SetupParams{
				ID: info.Endpoint.User, Info: info, WorkDir: mp,
				AccessMode: map[bool]string{true: control.AccessRO, false: control.AccessRW}[ro || c.Bool("ro")],
			}, c.Bool("debug"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "awcp-fs: mounted %s at %s until %s; Ctrl-C unmounts\n",
				info.ExportLocator, mp, expires.Local().Format(time.DateTime))
			timer := time.NewTimer(time.Until(expires))
			defer timer.Stop()
			gone := make(chan struct{})
			go func() { m.Wait(); close(gone) }()
			select {
			case <-ctx.Done():
			case <-timer.C:
				fmt.Fprintln(c.App.ErrWriter, "awcp-fs: the lease expired")
			case <-m.Done():
				fmt.Fprintln(c.App.ErrWriter, "awcp-fs: the delegator closed the connection (lease ended?)")
			case <-gone:
			}
			err = m.Unmount()
			<-gone
			return err
		},
	}
}

// readStart reads a START message, or a bare workDir, for an sshfs
// delegation. Without a lease, the certificate's validity is the limit.
func readStart(path string) (*control.WorkDirInfo, time.Time, bool, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, time.Time{}, false, err
	}
	var head struct {
		Type string `json:"type"`
	}
	json.Unmarshal(data, &head)
	var info *control.WorkDirInfo
	expires := time.Now().Add(24 * time.Hour)
	ro := false
	if head.Type == control.TypeStart {
		msg, err := control.DecodeMessage(data)
		if err != nil {
			return nil, time.Time{}, false, fmt.Errorf("%s: %w", path, err)
		}
		st := msg.(*control.Start)
		info = &st.WorkDir
		if t, err := control.ParseTimestamp(st.Lease.ExpiresAt); err == nil {
			expires = t
		}
		ro = st.Lease.AccessMode == control.AccessRO
	} else {
		info = new(control.WorkDirInfo)
		if err := json.Unmarshal(data, info); err != nil {
			return nil, time.Time{}, false, fmt.Errorf("%s: neither a START message nor a workDir: %w", path, err)
		}
		if err := control.ValidateWorkDir(info); err != nil {
			return nil, time.Time{}, false, fmt.Errorf("%s: %w", path, err)
		}
	}
	if info.Transport != control.TransportSSHFS {
		return nil, time.Time{}, false, errors.New("only sshfs delegations can be mounted; an archive one is a ZIP in workspaceBase64")
	}
	if until, ok := executor.CertificateExpiry(info); ok && until.Before(expires) {
		expires = until
	}
	return info, expires, ro, nil
}

func umountCommand() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Usage:     "unmount a delegation mounted by `awcp-fs mount`",
		ArgsUsage: "MOUNTPOINT",
		Flags:     clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("umount takes exactly one MOUNTPOINT")
			}
			return awcpfs.Unmount(c.Args().First())
		},
	}
}
