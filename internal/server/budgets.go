package server

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/gated/gated/bus/budget"
	"go.uber.org/zap"
)

// watchBudgets reads --budgets again every --budgets-poll, and swaps in a
// change once two polls in a row read it the same and it is valid; a bad
// or empty one is logged with its file and line, and the limits in force
// stay.
func (s *Server) watchBudgets() {
	path, every := s.cfg.Budgets, s.cfg.BudgetsPoll
	if path == "" || every <= 0 {
		return
	}
	last, _ := os.ReadFile(path)
	f := budgetsFile{last: last}
	s.watchers.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.watchCtx.Done():
				return
			case <-t.C:
			}
			data, err := os.ReadFile(path)
			if err != nil {
				if f.gone() { // said once, not every poll
					s.m.budgetReloads.WithLabelValues("refused").Inc()
					s.log.Error("budgets reload refused: the limits in force stay", zap.Error(err))
				}
				continue
			}
			if !f.settled(data) {
				continue
			}
			cfg, err := parseReloadedBudgets(path, data)
			if err != nil {
				s.m.budgetReloads.WithLabelValues("refused").Inc()
				s.log.Error("budgets reload refused: the limits in force stay", zap.Error(err))
				continue
			}
			s.budgets.SetConfig(cfg)
			s.m.budgetReloads.WithLabelValues("applied").Inc()
			s.log.Info("budgets reloaded", zap.String("file", path), zap.Strings("tenants", cfg.Tenants()))
		}
	})
}

// budgetsFile is what the budgets watcher knows of the file between two
// polls. A file being written can be read empty (truncated, not yet
// written) or half written, and half a file can be a valid one that
// drops some tenants' limits: a change is taken up only once two polls in
// a row have read the same bytes.
type budgetsFile struct {
	// last is the content taken up last, applied or refused; nil after a
	// read failed.
	last []byte
	// seen is a change read once, waiting for a second read to agree.
	seen []byte
}

// settled reports whether data, read by a poll, is a change to take up:
// different from the last content taken up, and the same as the poll
// before read. It then becomes the last content taken up.
func (f *budgetsFile) settled(data []byte) bool {
	if f.last != nil && bytes.Equal(data, f.last) {
		f.seen = nil
		return false
	}
	if f.seen == nil || !bytes.Equal(data, f.seen) {
		f.seen = bytes.Clone(data)
		return false
	}
	f.last, f.seen = f.seen, nil
	return true
}

// gone records a poll that could not read the file. It reports whether
// the file had been read before, so that the refusal is said once.
func (f *budgetsFile) gone() bool {
	had := f.last != nil
	f.last, f.seen = nil, nil
	return had
}

// parseReloadedBudgets parses a budgets file read again. An empty file is
// refused: on start-up it means the defaults, but read again it is far
// more often a file caught between its truncation and its write, or left
// so by an editor that failed, than a wish to drop every limit (which
// "tenants: {}" says).
func parseReloadedBudgets(path string, data []byte) (*budget.Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s is empty; to go back to the default limits, write \"tenants: {}\"", path)
	}
	return budget.ParseConfig(path, data)
}
