package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/progress"
)

// prefillStore copies the trails gated wrote for the warm-up's first
// denied and read proposals o.Prefill times over, under the nonce given,
// and reports the store's size afterwards. The records are MACed with the
// key in keyPath, gated's own, as gated's are.
func prefillStore(ctx context.Context, js jetstream.JetStream, o Options, warm Proposals, since time.Time, nonce, keyPath string, stderr io.Writer) (*PrefillReport, error) {
	var key []byte
	if keyPath != "" {
		data, err := os.ReadFile(keyPath)
		if err == nil {
			key, err = audit.ParseKey(data)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the embedded gated's audit key: %w", err)
		}
	}
	var trails []*Trail
	for _, p := range []Path{PathDenied, PathRead} {
		t, err := CaptureTrail(ctx, js, warm, p, 0, since)
		if err != nil {
			return nil, fmt.Errorf("capturing a trail to prefill with: %w", err)
		}
		trails = append(trails, t)
	}
	var done atomic.Int64
	stop := progress.Start(stderr, o.Progress, "prefill", o.Prefill, &done)
	res, err := Prefill(ctx, js, PrefillOptions{
		Proposals: o.Prefill, Gen: Proposals{Tenant: o.Tenant, Nonce: nonce}, Trails: trails, Done: &done, AuditKey: key,
	})
	stop()
	if err != nil {
		return nil, fmt.Errorf("prefilling the store: %w", err)
	}
	rep := &PrefillReport{PrefillResult: res}
	if s, err := streamState(ctx, js, audit.Stream); err == nil {
		rep.AuditRecords, rep.AuditBytes = s.Msgs, s.Bytes
	}
	if s, err := streamState(ctx, js, "KV_"+wire.VerdictBucket); err == nil {
		rep.BucketMessages, rep.BucketBytes = s.Msgs, s.Bytes
	}
	fmt.Fprintf(stderr, "prefilled %s\n", res)
	return rep, nil
}

func streamState(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return info.State, nil
}

// curvePoint is one size of a prefill curve.
type curvePoint struct {
	Prefill int     `json:"prefill"`
	Report  *Report `json:"report"`
}

// runCurve runs the bench once per size of --prefill-curve, each on
// a new embedded gated whose store was prefilled to that size, and prints
// the rates side by side against the first size's.
func runCurve(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	sizes, err := ParseSizes(o.Curve)
	if err != nil {
		return usageError("--prefill-curve: %v", err)
	}
	var points []curvePoint
	var runErr error
	for _, size := range sizes {
		one := o
		one.Curve, one.Prefill = "", size
		if o.JSON != "" {
			one.JSON = fmt.Sprintf("%s-prefill-%d.json", strings.TrimSuffix(o.JSON, ".json"), size)
		}
		fmt.Fprintf(stdout, "\n=== prefill %s ===\n", Thousands(size))
		rep, err := runOnce(ctx, one, stdout, stderr)
		if rep != nil {
			points = append(points, curvePoint{Prefill: size, Report: rep})
		}
		if err != nil {
			runErr = fmt.Errorf("prefill %d: %w", size, err)
			break
		}
	}
	printCurve(stdout, points)
	if o.JSON != "" && len(points) > 0 {
		data, err := json.MarshalIndent(points, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSON, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing --json: %w", err)
		}
	}
	return runErr
}

// printCurve writes the curve: per size, the store, the rate against the
// first size's, latency, and gated's resident set along the run.
func printCurve(w io.Writer, points []curvePoint) {
	if len(points) == 0 {
		return
	}
	fmt.Fprintf(w, "\nprefill curve (publish → verdict, all paths)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "prefill\tbucket msgs\taudit records\tstore MB\tper s\t× first\tp50 ms\tp99 ms\tCPU µs/proposal\tRSS start / middle / end MB\t")
	var base float64
	for i, p := range points {
		all := Overall(p.Report.Gated)
		if i == 0 {
			base = all.PerSecond
		}
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", all.PerSecond/base)
		}
		var msgs, recs, mb string = "—", "—", "—"
		if pf := p.Report.Prefill; pf != nil {
			msgs, recs = Thousands(int(pf.BucketMessages)), Thousands(int(pf.AuditRecords))
			mb = fmt.Sprintf("%.0f", float64(pf.AuditBytes+pf.BucketBytes)/(1<<20))
		}
		cpu, rss := "—", "—"
		if g := p.Report.GatedProc; g != nil {
			if all.Answered > 0 {
				cpu = fmt.Sprintf("%.0f", g.CPUSeconds/float64(all.Answered)*1e6)
			}
			if g.RSS != nil {
				rss = fmt.Sprintf("%.0f / %.0f / %.0f", g.RSS.StartMB, g.RSS.MiddleMB, g.RSS.EndMB)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%s\t%.2f\t%.2f\t%s\t%s\t\n", Thousands(p.Prefill), msgs, recs, mb,
			all.PerSecond, ratio, all.P50MS, all.P99MS, cpu, rss)
	}
	_ = tw.Flush()
}
