package eval

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// startProgress draws a progress bar on opts.Progress every 200 ms until
// the returned function is called, which draws the final state and ends
// the line.
func (r *runner) startProgress() func() {
	w := r.opts.Progress
	if w == nil {
		return func() {}
	}
	start := time.Now()
	draw := func() {
		done, total := r.done.Load(), r.total.Load()
		fmt.Fprintf(w, "\r%s", progressLine(done, total, time.Since(start)))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				draw()
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			draw()
			fmt.Fprintln(w)
		})
	}
}

// progressLine renders one line of the bar, e.g.
// "[##########----------]  50%  2,500/5,000 compactions  0:12, ~0:12 left".
func progressLine(done, total int64, elapsed time.Duration) string {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	s := fmt.Sprintf("[%s] %3.0f%%  %s/%s compactions  %s", bar, frac*100, thousands(int(done)), thousands(int(total)), clock(elapsed))
	if done > 0 && done < total {
		left := time.Duration(float64(elapsed) / float64(done) * float64(total-done))
		s += ", ~" + clock(left) + " left"
	}
	return s + "  "
}

func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
