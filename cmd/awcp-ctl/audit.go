package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// policyFlags are the export policy's flags, for export and mcp.
func policyFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "hide", EnvVars: []string{"AWCP_HIDE"},
			Usage: "a pattern of paths not to lend, matched anywhere in the directory (\"*.pem\", \".env*\", \"config/secrets.json\"); repeatable; added to the defaults"},
		&cli.BoolFlag{Name: "no-hide-defaults", Usage: "lend what the default hide patterns keep back: " + strings.Join(delegator.DefaultHide, " ")},
		&cli.BoolFlag{Name: "no-delete", EnvVars: []string{"AWCP_NO_DELETE"}, Usage: "nothing of yours goes away: no remove, rename, replace or truncation of what was there before; the agent's own files excepted"},
		&cli.StringFlag{Name: "peer-key", EnvVars: []string{"AWCP_PEER_KEY"},
			Usage: "the executor's identity key (ssh-ed25519 AAAA…, as `awcp-fs id` prints it): the connection is TLS, and refused unless the executor holds it"},
		&cli.BoolFlag{Name: "plain-http", EnvVars: []string{"AWCP_PLAIN_HTTP"},
			Usage: "speak plain HTTP to an http:// executor that speaks nothing else (the reference implementation): the token, the workspace and the session travel in clear"},
		&cli.BoolFlag{Name: "allow-git-control", EnvVars: []string{"AWCP_ALLOW_GIT_CONTROL"},
			Usage: "let the executor change what git runs or obeys in your repositories (.git/config, .git/hooks, .git/info, …): read-only to it unless given; it can commit either way"},
		&cli.BoolFlag{Name: "lend-hidden-history", EnvVars: []string{"AWCP_LEND_HIDDEN_HISTORY"},
			Usage: "lend a .git whose index or history holds a path the hide patterns keep back (its content is in .git/objects, readable by the agent): refused unless given"},
		clikit.BytesFlag("max-write-bytes", 0, "bound what the executor writes over the live mount (the git transport: what it pushes), e.g. 500M (K, M, G: powers of 1024)", "AWCP_MAX_WRITE_BYTES"),
		&cli.IntFlag{Name: "git-history", EnvVars: []string{"AWCP_GIT_HISTORY"},
			Usage: "with --transport git: lend the last `N` commits of the directory's branch beneath the export view (refused if a hidden path is in any of them); default none"},
		&cli.StringFlag{Name: "snapshot", EnvVars: []string{"AWCP_SNAPSHOT"}, Value: lease.SnapshotAuto,
			Usage: "what becomes of the result: auto (applied as it comes; over a live mount, written in place), staged (your directory is not touched: review it with awcp-ctl diff, then apply or discard) or discard"},
	}, admissionFlags()...)
}

// admissionFlags are admission's limits, for an export (policyFlags) and
// as the defaults of the daemon's (serve).
func admissionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "max-files", EnvVars: []string{"AWCP_MAX_FILES"}, DefaultText: "10000 for the archive, the spec's; 1000000 for a live mount",
			Usage: "admission: most files lent"},
		withDefaultText(clikit.BytesFlag("max-bytes", 0, "admission: most bytes lent", "AWCP_MAX_BYTES"), "100M for the archive; 50G for a live mount"),
		withDefaultText(clikit.BytesFlag("max-file-bytes", 0, "admission: largest file lent", "AWCP_MAX_FILE_BYTES"), "50M for the archive; 10G for a live mount"),
	}
}

// withDefaultText is f with the default its help shows (a BytesFlag's).
func withDefaultText(f cli.Flag, text string) cli.Flag {
	if g, ok := f.(*cli.GenericFlag); ok {
		g.DefaultText = text
	}
	return f
}

// admissionLimits are the limits policyFlags set; zero: the transport's.
func admissionLimits(c *cli.Context) delegator.AdmissionLimits {
	return delegator.AdmissionLimits{MaxFileCount: c.Int64("max-files"), MaxTotalBytes: clikit.Bytes(c, "max-bytes"), MaxFileBytes: clikit.Bytes(c, "max-file-bytes")}
}

// auditLine is one operation as the audit command prints it.
func auditLine(op delegator.Op) string {
	var b strings.Builder
	// The names are the executor's to choose: a newline or an escape
	// sequence in one must not print a forged line or reach the terminal.
	fmt.Fprintf(&b, "%s  %-7s %s", op.At.Local().Format("15:04:05.000"), clikit.Printable(op.Kind), clikit.Printable(op.Path))
	if op.To != "" {
		fmt.Fprintf(&b, " -> %s", clikit.Printable(op.To))
	}
	if op.Bytes > 0 {
		fmt.Fprintf(&b, "  %d bytes", op.Bytes)
	}
	if op.Ahead {
		b.WriteString("  (fetched ahead with its directory)")
	}
	switch {
	case op.Refused:
		fmt.Fprintf(&b, "  REFUSED: %s", clikit.Printable(op.Err))
	case op.Err != "":
		fmt.Fprintf(&b, "  failed: %s", clikit.Printable(op.Err))
	}
	return b.String()
}

// summaryLine is an audit summary in one line.
func summaryLine(s *lease.AuditSummary, atMount *lease.MountRefused) string {
	if s.FromDiff {
		return fmt.Sprintf("archive: whole directory sent; %d files written (%d created), %d deleted", s.FilesWritten, s.Created, s.Deleted)
	}
	line := fmt.Sprintf("%d files read (%s), %d written (%s), %d created, %d deleted, %d refused",
		s.FilesRead, delegator.HumanBytes(s.BytesRead), s.FilesWritten, delegator.HumanBytes(s.BytesWritten), s.Created, s.Deleted, s.Refused)
	if atMount != nil {
		line += fmt.Sprintf(" here and %d at the executor's read-only mount", atMount.Count)
	}
	if s.Dropped > 0 {
		line += fmt.Sprintf("; the log keeps the last %d of %d operations", s.Operations-s.Dropped, s.Operations)
	}
	return line
}

func auditCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "show what the executor did in the directory lent: every operation over the live mount",
		ArgsUsage: "ID",
		Flags: append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing operations until the delegation ends"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per operation"},
		),
		Action: func(c *cli.Context) error {
			e, d, err := openDelegation(c)
			if err != nil {
				return err
			}
			return printAudit(ctx, c, e, d)
		},
	}
}

// auditPage is how many operations are read from the store at once.
const auditPage = 1000

func printAudit(ctx context.Context, c *cli.Context, e *env, d *lease.Delegation) error {
	w := c.App.Writer
	var last uint64
	var sum *lease.AuditSummary
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		// A page at a time: the log holds up to --audit-records
		// operations, whose names the executor chose.
		for {
			recs, s, err := e.store.AuditAfter(d.ID, last, auditPage)
			if err != nil {
				return err
			}
			if s != nil {
				sum = s
			}
			for _, r := range recs {
				last = r.Seq
				if err := printOp(w, r.Data, c.Bool("json")); err != nil {
					return err
				}
			}
			if len(recs) < auditPage {
				break
			}
		}
		if !c.Bool("follow") || complete(d) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var err error
		if d, err = e.store.Delegation(d.ID); err != nil {
			return err
		}
	}
	if d.Audit != nil {
		sum = d.Audit
	}
	switch {
	case c.Bool("json"):
	case sum != nil:
		fmt.Fprintf(c.App.ErrWriter, "audit: %s\n", summaryLine(sum, nil))
	case d.Transport != control.TransportSSHFS:
		fmt.Fprintf(c.App.ErrWriter, "audit: no operations are recorded for the %s transport\n", d.Transport)
	default:
		fmt.Fprintln(c.App.ErrWriter, "audit: nothing recorded yet")
	}
	return nil
}

// complete reports whether d's audit log is all written: once a live
// mount's delegation has ended, its last operations are written when its
// grant is revoked, and its summary is set then.
func complete(d *lease.Delegation) bool {
	return d.State.Terminal() && (d.Audit != nil || d.Transport != control.TransportSSHFS ||
		time.Since(d.EndedAt) > 5*time.Second)
}

func printOp(w io.Writer, data []byte, asJSON bool) error {
	if asJSON {
		_, err := fmt.Fprintf(w, "%s\n", data)
		return err
	}
	var op delegator.Op
	if err := json.Unmarshal(data, &op); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, auditLine(op))
	return err
}
