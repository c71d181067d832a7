package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/evidence"
	"github.com/gated/gated/engine/wire"
)

// evidenceKeyOptions name gated's checkpoint keys: the key file, or
// public keys alone for the commands that only read.
type evidenceKeyOptions struct {
	keyFile string
	public  []string
	witness []string
}

func (o *evidenceKeyOptions) register(f *pflag.FlagSet, withPublic bool) {
	f.StringVar(&o.keyFile, "checkpoint-key-file", os.Getenv("GATED_CHECKPOINT_KEY_FILE"), "the checkpoint key file (docs/AUDIT.md#evidence; env GATED_CHECKPOINT_KEY_FILE)")
	if withPublic {
		f.StringSliceVar(&o.public, "key", nil, "a checkpoint public key (name+hash+key; repeatable), instead of --checkpoint-key-file")
	}
	f.StringSliceVar(&o.witness, "witness-key", nil, "a witness's public key (name+hash+key; repeatable)")
}

// keys reads the key file.
func (o *evidenceKeyOptions) keys() (*evidence.Keys, error) {
	if o.keyFile == "" {
		return nil, usageError("--checkpoint-key-file is required")
	}
	data, err := os.ReadFile(o.keyFile)
	if err != nil {
		return nil, err
	}
	k, err := evidence.ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.keyFile, err)
	}
	return k, nil
}

// publicKeys are --key's, or the key file's public keys.
func (o *evidenceKeyOptions) publicKeys() ([]string, error) {
	if len(o.public) > 0 {
		return o.public, nil
	}
	k, err := o.keys()
	if err != nil {
		return nil, err
	}
	return k.Public, nil
}

func auditCheckpointCmd() *cobra.Command {
	var (
		o       auditReadOptions
		k       evidenceKeyOptions
		create  string
		rotate  bool
		cosign  string
		showPub bool
		every   time.Duration
	)
	c := &cobra.Command{
		Use:   "checkpoint",
		Short: "Sign the head of each tenant's Merkle tree of audit records",
		Long: `checkpoint rebuilds each tenant's Merkle tree from the audit stream (or
--tenant's), checks that it extends the last checkpoint stored (a consistency
proof), signs its head with the checkpoint key and stores it in the
GATED_CHECKPOINTS stream. A tenant whose tree has not grown keeps its last
checkpoint. A head inconsistent with the last checkpoint is refused: the
stream no longer holds what was signed.

--create-key NAME creates the key file, a new Ed25519 key for the log NAME
(a host name, say: it begins every checkpoint's origin line), and
--rotate-key replaces its key with a new one, keeping the old public key
for the checkpoints it signed. --public-key prints the public keys.

--every D signs again every D until interrupted (a signer at an interval,
beside gated serve); without it, once.

--cosign FILE stores a witness's cosignature: FILE is a stored checkpoint
with the witness's signature added, verified with --witness-key.

Exit status: 0 done, 3 a head refused, 2 bad usage, 1 failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case create != "":
				return createCheckpointKey(k.keyFile, create, out)
			case rotate:
				return rotateCheckpointKey(k.keyFile, out)
			}
			keys, err := k.keys()
			if err != nil {
				return err
			}
			if showPub {
				_, err := fmt.Fprintln(out, strings.Join(keys.Public, "\n"))
				return err
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			if cosign != "" {
				if o.tenant == "" || len(k.witness) != 1 {
					return usageError("--cosign needs --tenant and one --witness-key")
				}
				msg, err := os.ReadFile(cosign)
				if err != nil {
					return err
				}
				c, err := evidence.Cosign(cmd.Context(), js, o.tenant, msg, keys.Public, k.witness[0])
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "%s: cosignature of the checkpoint of size %d stored\n", o.tenant, c.Size)
				return err
			}
			signer := evidence.NewSigner(js, keys)
			if every > 0 {
				t := time.NewTicker(every)
				defer t.Stop()
				for {
					if err := signHeads(cmd, js, o, signer); err != nil {
						var ex *exitError
						if !errors.As(err, &ex) {
							return err
						}
					}
					select {
					case <-cmd.Context().Done():
						return nil
					case <-t.C:
					}
				}
			}
			return signHeads(cmd, js, o, signer)
		},
	}
	f := c.Flags()
	o.register(f)
	k.register(f, false)
	f.StringVar(&create, "create-key", "", "create the key file with a new key for the log of this name")
	f.BoolVar(&rotate, "rotate-key", false, "replace the key file's key with a new one, keeping the old public key")
	f.StringVar(&cosign, "cosign", "", "store this checkpoint's witness cosignature (with --tenant and --witness-key)")
	f.BoolVar(&showPub, "public-key", false, "print the public keys and exit")
	f.DurationVar(&every, "every", 0, "sign again at this interval until interrupted")
	return c
}

// signHeads signs the head of --tenant's tree, or of every tenant's.
func signHeads(cmd *cobra.Command, js jetstream.JetStream, o auditReadOptions, signer *evidence.Signer) error {
	out := cmd.OutOrStdout()
	tenants := []string{o.tenant}
	if o.tenant == "" {
		var err error
		if tenants, err = auditTenants(cmd, js); err != nil {
			return err
		}
	}
	refused := 0
	for _, t := range tenants {
		c, signed, err := signer.Sign(cmd.Context(), t, time.Now())
		if errors.Is(err, evidence.ErrInconsistent) {
			refused++
			fmt.Fprintf(cmd.ErrOrStderr(), "gated: %v\n", err)
			continue
		}
		if err != nil {
			return err
		}
		if o.json {
			err = json.NewEncoder(out).Encode(map[string]any{"tenant": t, "size": c.Size, "root": c.Root, "time": c.Time, "signed": signed, "checkpoint": string(c.Note)})
		} else {
			verb := "signed"
			if !signed {
				verb = "unchanged"
			}
			_, err = fmt.Fprintf(out, "%s: %s size %d root %s\n", t, verb, c.Size, c.Root)
		}
		if err != nil {
			return err
		}
	}
	if refused > 0 {
		return &exitError{code: exitAuditProblems, err: fmt.Errorf("%d head(s) refused", refused), silent: true}
	}
	return nil
}

// auditTenants are the tenants with records in the audit stream.
func auditTenants(cmd *cobra.Command, js jetstream.JetStream) ([]string, error) {
	s, err := js.Stream(cmd.Context(), audit.Stream)
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	info, err := s.Info(cmd.Context(), jetstream.WithSubjectFilter(wire.AuditSubjectPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("listing the audit stream's tenants: %w", err)
	}
	var out []string
	for subj := range info.State.Subjects {
		t, _, _ := strings.Cut(strings.TrimPrefix(subj, wire.AuditSubjectPrefix), ".")
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

func createCheckpointKey(path, name string, out io.Writer) error {
	if path == "" {
		return usageError("--create-key needs --checkpoint-key-file")
	}
	pub, err := evidence.CreateKeyFile(path, name)
	if errors.Is(err, fs.ErrExist) {
		return usageError("%s exists: --rotate-key replaces its key", path)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, pub)
	return err
}

func rotateCheckpointKey(path string, out io.Writer) error {
	if path == "" {
		return usageError("--rotate-key needs --checkpoint-key-file")
	}
	pub, err := evidence.RotateKeyFile(path)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, strings.Join(pub, "\n"))
	return err
}

func auditProveCmd() *cobra.Command {
	var (
		o        auditReadOptions
		k        evidenceKeyOptions
		seq      uint64
		from, to int64
	)
	c := &cobra.Command{
		Use:   "prove TENANT [ID]",
		Short: "Print the inclusion proof of a decision's records, or a consistency proof",
		Long: `prove prints, as an evidence bundle (docs/AUDIT.md#evidence), the records of
proposal ID in TENANT's audit stream (or the record at --seq, a verdict's
audit_seq) with their inclusion proofs against the tenant's last checkpoint,
or with --from and --to the two checkpoints of those tree sizes and the
consistency proof between them. gated audit verify --bundle checks it.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			eo := evidence.ExportOptions{Tenant: args[0], From: from, To: to}
			if len(args) == 2 {
				eo.IDs = args[1:]
			}
			if seq > 0 {
				eo.Seqs = []uint64{seq}
			}
			if (len(eo.IDs)+len(eo.Seqs) == 0) == (from == 0 && to == 0) {
				return usageError("give an ID or --seq, or --from and --to")
			}
			return runExport(cmd, o, k, eo, "")
		},
	}
	f := c.Flags()
	o.register(f)
	k.register(f, true)
	f.Uint64Var(&seq, "seq", 0, "the record at this stream sequence (a verdict's audit_seq)")
	f.Int64Var(&from, "from", 0, "a consistency proof from the checkpoint of this tree size")
	f.Int64Var(&to, "to", 0, "to the checkpoint of this tree size")
	return c
}

func auditExportCmd() *cobra.Command {
	var (
		o     auditReadOptions
		k     evidenceKeyOptions
		since string
		ids   []string
		out   string
	)
	c := &cobra.Command{
		Use:   "export",
		Short: "Write a tenant's evidence bundle: records, checkpoints, proofs, public keys",
		Long: `export writes one self-contained file of --tenant's evidence
(docs/AUDIT.md#evidence): the tenant's signed checkpoints and the consistency
proofs between them, the public keys, and its records up to the last
checkpoint (all, those stored since --since, or those of the proposals --ids,
each with its inclusion proof). gated audit verify --bundle, or python -m
gated.evidence, checks it without NATS and without any secret.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.tenant == "" {
				return usageError("--tenant is required")
			}
			if since != "" && len(ids) > 0 {
				return usageError("--since and --ids do not go together")
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			return runExport(cmd, o, k, evidence.ExportOptions{Tenant: o.tenant, Since: from, IDs: ids}, out)
		},
	}
	f := c.Flags()
	o.register(f)
	k.register(f, true)
	f.StringVar(&since, "since", "", "records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.StringSliceVar(&ids, "ids", nil, "only the records of these proposal ids, each with its inclusion proof")
	f.StringVar(&out, "out", "", "write the bundle to this file instead of standard output")
	return c
}

func runExport(cmd *cobra.Command, o auditReadOptions, k evidenceKeyOptions, eo evidence.ExportOptions, out string) error {
	if err := o.check(); err != nil {
		return err
	}
	if eo.Tenant != gated.UnknownTenant && !gated.ValidTenant(eo.Tenant) {
		return usageError("tenant %q must match [a-z0-9_-]{1,64}, or be _ for gated's own events", eo.Tenant)
	}
	pub, err := k.publicKeys()
	if err != nil {
		return err
	}
	eo.Keys, eo.WitnessKeys = pub, k.witness
	nc, js, err := o.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	w := cmd.OutOrStdout()
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		w = f
	}
	h, err := evidence.Export(cmd.Context(), js, w, eo)
	if err != nil {
		if out != "" {
			_ = os.Remove(out)
		}
		return err
	}
	if out != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d record(s), %d checkpoint(s) of tenant %s\n", out, h.Records, len(h.Checkpoints), eo.Tenant)
	}
	return nil
}

// verifyBundle is `audit verify --bundle`.
func verifyBundle(cmd *cobra.Command, path, tenant string, k evidenceKeyOptions, asJSON bool) error {
	pub := k.public
	if len(pub) == 0 && k.keyFile != "" {
		var err error
		if pub, err = k.publicKeys(); err != nil {
			return err
		}
	}
	open := func() (io.ReadCloser, error) {
		if path == "-" {
			return io.NopCloser(cmd.InOrStdin()), nil
		}
		return os.Open(path)
	}
	res, err := evidence.Verify(open, evidence.VerifyOptions{Tenant: tenant, Keys: pub, Witnesses: k.witness})
	if errors.Is(err, evidence.ErrBundle) {
		return &exitError{code: exitAuditProblems, err: err}
	}
	if err != nil {
		return err
	}
	last := res.Checkpoints[len(res.Checkpoints)-1]
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(map[string]any{
			"tenant": res.Tenant, "records": res.Records, "checkpoints": len(res.Checkpoints),
			"size": last.Size, "root": last.Root, "time": last.Time, "witnessed": res.Witnessed,
			"keys_from_bundle": res.KeysFromBundle,
		})
	}
	fmt.Fprintf(out, "tenant %s: %d record(s) proved against the checkpoint of size %d signed at %s (root %s); %d checkpoint(s) consistent\n",
		res.Tenant, res.Records, last.Size, last.Time.Format(time.RFC3339), last.Root, len(res.Checkpoints))
	if len(res.Witnessed) > 0 {
		fmt.Fprintf(out, "cosigned by %s\n", strings.Join(res.Witnessed, ", "))
	}
	if res.KeysFromBundle {
		fmt.Fprintln(out, "warning: checked with the keys the bundle carries; give gated's public key with --key to know who signed")
	}
	return nil
}
