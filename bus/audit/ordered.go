package audit

import (
	"context"
	"runtime"
	"sync"
)

// inOrder runs work on batches of items on several goroutines and hands
// the batches, worked, to sink one at a time in the order produce made
// them: the per-item work of a read uses every core while the read goes
// on, and what needs the items in order still gets them in order.
//
// produce calls emit with each batch, and returns when it has no more or
// emit fails. work(w, items) runs on worker w (0 ≤ w < workers), never on
// two batches at once for one w, so a worker may keep state of its own.
// At most 2 × workers batches are in flight. inOrder returns the first
// error of produce or sink, or ctx's; when sink fails, produce's emit
// fails too, and every goroutine has ended when inOrder returns.
func inOrder[T any](ctx context.Context, workers int, produce func(emit func([]T) error) error,
	work func(w int, items []T), sink func([]T) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type batch struct {
		items []T
		done  chan struct{}
	}
	jobs := make(chan *batch, workers)
	order := make(chan *batch, 2*workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range jobs {
				work(w, b.items)
				close(b.done)
			}
		})
	}
	var produceErr error
	wg.Go(func() {
		defer close(jobs)
		defer close(order)
		produceErr = produce(func(items []T) error {
			b := &batch{items: items, done: make(chan struct{})}
			// order first: sink waits for the batches in that order.
			select {
			case order <- b:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case jobs <- b:
				return nil
			case <-ctx.Done():
				// sink may be waiting for b: it is not worked, so let go.
				close(b.done)
				return ctx.Err()
			}
		})
	})
	var sinkErr error
	for b := range order {
		<-b.done
		if sinkErr != nil {
			continue
		}
		if sinkErr = ctx.Err(); sinkErr == nil {
			sinkErr = sink(b.items)
		}
		if sinkErr != nil {
			cancel()
		}
	}
	wg.Wait()
	switch {
	case sinkErr != nil:
		return sinkErr
	case produceErr != nil:
		return produceErr
	}
	return nil
}
