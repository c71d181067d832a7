package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/internal/strictjson"
)

func proposeCmd() *cobra.Command {
	var (
		file       string
		url        string
		wait       time.Duration
		viaService bool
		watch      bool
		asJSON     bool
		conn       natsConnOptions
	)
	c := &cobra.Command{
		Use:   "propose -f proposal.json",
		Short: "Publish a proposal and print its verdict",
		Long: `propose publishes one proposal, waits for its verdict and prints it as JSON.
It publishes on gated.proposals.<tenant>.<action> and waits on
gated.verdicts.<tenant>.<id>, as a fleet does; with --via-service it asks the
request/reply endpoint gated.review.<tenant> instead. Both take the same
durable path through gated.

With --watch it also follows gated.status.<tenant>.<id> and prints each
stage of the proposal as it comes (received, policy_decided, review_started,
awaiting_operator, decided), one line each, before the verdict; with --json
each stage is one line of JSON, the status event gated published, and
the verdict follows as one line of JSON too.

Exit status: 0 approved, 3 not approved (rejected, blocked, error, timeout,
invalid) or the id is taken by another proposal, 2 bad usage or unreadable
input file, 1 failure (no NATS, no verdict in time, review service
unavailable).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError("-f is required: a proposal JSON file, or - for standard input")
			}
			if watch && viaService {
				return usageError("--watch follows a published proposal; it does not combine with --via-service")
			}
			if asJSON && !watch {
				return usageError("--json prints the stages of --watch; the verdict is JSON already")
			}
			if wait <= 0 {
				return usageError("--wait %s must be positive", wait)
			}
			data, err := readInput(file, cmd.InOrStdin())
			if err != nil {
				return usageError("reading %s: %v", file, err)
			}
			if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
				return usageError("%s", jsonError(file, data, err))
			}
			if _, err := fleet.AddressOf(data); err != nil {
				return usageError("%s: %v", file, err)
			}
			nc, err := conn.connect(url, "gated-propose", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			defer nc.Close()
			client, err := fleet.NewClient(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			var v *gated.Verdict
			switch {
			case viaService:
				v, err = client.RequestReview(ctx, data)
			case watch:
				stdout := cmd.OutOrStdout()
				v, err = client.ProposeRaw(ctx, data, fleet.WithStatus(func(u fleet.StatusUpdate) {
					printStatus(stdout, cmd.ErrOrStderr(), u, asJSON)
				}))
			default:
				v, err = client.ProposeRaw(ctx, data)
			}
			if err != nil {
				return proposeError(err)
			}
			var out []byte
			if asJSON {
				out, _ = json.Marshal(v)
			} else {
				out, _ = json.MarshalIndent(v, "", "  ")
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			if err := fleet.CheckVerdict(v); err != nil {
				return &exitError{code: exitNotApproved, err: fmt.Errorf("not approved: %s", v.Outcome), silent: true}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVarP(&file, "file", "f", "", "proposal JSON file, or - for standard input")
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&wait, "wait", 90*time.Second, "how long to wait for the verdict")
	f.BoolVar(&viaService, "via-service", false, "ask the review service on gated.review.<tenant> (request/reply) instead of publishing and waiting")
	f.BoolVar(&watch, "watch", false, "print each stage of the proposal (gated.status.<tenant>.<id>) as it comes, before the verdict")
	f.BoolVar(&asJSON, "json", false, "with --watch: print each stage, and the verdict, as one line of JSON")
	conn.register(f)
	return c
}

// printStatus prints one stage of a watched proposal: a line of text, or
// the status event as one line of JSON. A malformed status event is
// reported on stderr and does not stop the wait for the verdict.
func printStatus(stdout, stderr io.Writer, u fleet.StatusUpdate, asJSON bool) {
	if u.Err != nil {
		fmt.Fprintf(stderr, "gated propose: %v\n", u.Err)
		return
	}
	st := u.Status
	if asJSON {
		b, _ := json.Marshal(st)
		fmt.Fprintln(stdout, string(b))
		return
	}
	line := fmt.Sprintf("%-17s %s", st.Stage, st.At.Format(time.RFC3339Nano))
	switch {
	case st.Stage == gated.StatusReviewStarted:
		line += " reviewer " + st.Reviewer
		if st.Deadline != nil {
			line += " deadline " + st.Deadline.Format(time.RFC3339)
		}
	case st.Stage == gated.StatusAwaitingOperator:
		line += " deadline " + st.Deadline.Format(time.RFC3339)
		if st.Reason != "" {
			line += ": " + st.Reason
		}
	case st.Verdict != nil:
		line += fmt.Sprintf(" %s: %s", st.Verdict.Outcome, st.Verdict.Reason)
	}
	fmt.Fprintln(stdout, line)
}

// proposeError gives a failed proposal its exit status.
func proposeError(err error) error {
	switch {
	case errors.Is(err, fleet.ErrBadProposal), errors.Is(err, fleet.ErrTenantMismatch):
		return usageError("%v", err)
	case errors.Is(err, fleet.ErrIDReused):
		return &exitError{code: exitNotApproved, err: fmt.Errorf("%v; it was not decided: choose a new id", err)}
	case errors.Is(err, fleet.ErrNoVerdict):
		return fmt.Errorf("%w; the proposal may still be decided: check with gated verdict get TENANT ID", err)
	}
	return err
}

// jsonError says where the JSON of the file name (data) goes wrong, at
// its line and column as editors count them: "approved.json:8:3: not
// valid JSON: invalid character…", or where a cut file ends.
func jsonError(name string, data []byte, err error) string {
	if name == "-" {
		name = "standard input"
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) && syn.Error() == "unexpected end of JSON input" {
		line, col := strictjson.Position(data, int64(len(data)))
		return fmt.Sprintf("%s:%d:%d: not valid JSON: it ends before the JSON does (is the file cut short?)", name, line, col)
	}
	if line, col, ok := strictjson.ErrorPosition(data, err); ok {
		return fmt.Sprintf("%s:%d:%d: not valid JSON: %v", name, line, col, err)
	}
	return fmt.Sprintf("%s: not valid JSON: %v", name, err)
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, 16<<20))
	}
	return os.ReadFile(name)
}
