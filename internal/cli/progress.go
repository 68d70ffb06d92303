package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is the CLI's one progress display, shared by template and
// platform builds, uploads, deliveries, cp, moves and the stages of
// create, start and stop. On a terminal it is a progressbar line (a bar
// with bytes when the total is known, else a spinner) with the time
// elapsed; elsewhere (a log, a pipe, a test) it writes one plain line each
// time the stage changes, and byte counts a few times a second at most.
//
// It uses github.com/schollz/progressbar: one bar at a time is all the CLI
// shows, which is what that library does simply (mpb's concurrent bars
// are not needed), and it already handles terminal width, throttling,
// byte units and elapsed time.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	what  string
	bar   *progressbar.ProgressBar
	total int64
	last  time.Time // plain mode: when bytes were last written
	done  int64     // plain mode: the bytes last written
}

// newProgress shows progress on w (the command's stderr).
func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), start: time.Now()}
}

// isTerminal reports whether w is a terminal: bars are for people.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// elapsed is the time since the display began, in whole seconds.
func (p *progress) elapsed() string { return time.Since(p.start).Truncate(time.Second).String() }

// stage shows that a new stage began (placing, booting, ...); a stage
// already shown changes nothing.
func (p *progress) stage(what string) {
	if what == p.what && p.total == 0 {
		return
	}
	p.end()
	p.what, p.total = what, 0
	if !p.tty {
		fmt.Fprintf(p.w, "%s (%s)\n", what, p.elapsed())
		return
	}
	p.bar = progressbar.NewOptions64(-1, p.options(what)...)
	_ = p.bar.RenderBlank()
}

// bytes shows done of total bytes of what (total zero or less: unknown).
func (p *progress) bytes(what string, done, total int64) {
	if what != p.what || total != p.total || p.bar == nil && p.tty {
		p.end()
		p.what, p.total, p.last = what, total, time.Time{}
		if p.tty {
			max := total
			if max <= 0 {
				max = -1
			}
			p.bar = progressbar.NewOptions64(max, append(p.options(what), progressbar.OptionShowBytes(true), progressbar.OptionShowCount(), progressbar.OptionUseIECUnits(true))...)
		}
	}
	if p.tty {
		_ = p.bar.Set64(done)
		return
	}
	if done == p.done && !p.last.IsZero() || time.Since(p.last) < 300*time.Millisecond && done != total {
		return // nothing new, or too soon
	}
	p.last, p.done = time.Now(), done
	if total > 0 {
		fmt.Fprintf(p.w, "%s %d%% (%s of %s, %s)\n", what, done*100/total, showSize(uint64(done)), showSize(uint64(total)), p.elapsed())
	} else {
		fmt.Fprintf(p.w, "%s: %s (%s)\n", what, showSize(uint64(done)), p.elapsed())
	}
}

// line writes a message of its own under the display.
func (p *progress) line(format string, args ...any) {
	p.end()
	p.what = ""
	fmt.Fprintf(p.w, format+"\n", args...)
}

// end finishes the bar on screen, keeping its last state.
func (p *progress) end() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

func (p *progress) options(what string) []progressbar.Option {
	return []progressbar.Option{
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetWidth(20),
		progressbar.OptionShowElapsedTimeOnFinish(),
	}
}
