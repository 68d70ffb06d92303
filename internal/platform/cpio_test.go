package platform_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/platform"
)

func TestCpioRoundTrip(t *testing.T) {
	type entry struct {
		platform.CpioEntry
		data string
	}
	entries := []entry{
		{CpioEntry: platform.CpioEntry{Name: "dev", Mode: platform.ModeDir | 0o755}},
		{CpioEntry: platform.CpioEntry{Name: "dev/console", Mode: platform.ModeChar | 0o600, RdevMajor: 5, RdevMinor: 1}},
		{CpioEntry: platform.CpioEntry{Name: "empty", Mode: platform.ModeReg | 0o644}},
		// Content lengths 1, 3, 4, 5 exercise every padding.
		{CpioEntry: platform.CpioEntry{Name: "init", Mode: platform.ModeReg | 0o755}, data: "x"},
		{CpioEntry: platform.CpioEntry{Name: "lib/a", Mode: platform.ModeReg | 0o644}, data: "abc"},
		{CpioEntry: platform.CpioEntry{Name: "lib/bb", Mode: platform.ModeReg | 0o644}, data: "abcd"},
		{CpioEntry: platform.CpioEntry{Name: "lib/ccc", Mode: platform.ModeReg | 0o644}, data: strings.Repeat("z", 5)},
	}
	var buf bytes.Buffer
	w := platform.NewCpioWriter(&buf)
	for _, e := range entries {
		e.Size = int64(len(e.data))
		if err := w.WriteHeader(e.CpioEntry); err != nil {
			t.Fatal(err)
		}
		// Two writes: content may arrive in pieces.
		half := len(e.data) / 2
		for _, part := range []string{e.data[:half], e.data[half:]} {
			if _, err := w.Write([]byte(part)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not 4-aligned", buf.Len())
	}
	got, err := readCpio(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Fatalf("read %d entries, wrote %d", len(got), len(entries))
	}
	inos := map[uint32]bool{}
	for i, g := range got {
		e := entries[i]
		if g.Name != e.Name || g.Mode != e.Mode || string(g.Data) != e.data ||
			g.RdevMajor != e.RdevMajor || g.RdevMinor != e.RdevMinor {
			t.Errorf("entry %d: got %+v, want %+v", i, g, e)
		}
		if g.UID != 0 || g.GID != 0 || g.Mtime != 0 || g.Nlink == 0 || inos[g.Ino] {
			t.Errorf("entry %s: uid %d gid %d mtime %d nlink %d ino %d (reused: %v)",
				g.Name, g.UID, g.GID, g.Mtime, g.Nlink, g.Ino, inos[g.Ino])
		}
		inos[g.Ino] = true
	}
}

func TestCpioWriterRejectsWrongSizes(t *testing.T) {
	w := platform.NewCpioWriter(new(bytes.Buffer))
	if err := w.WriteHeader(platform.CpioEntry{Name: "f", Mode: platform.ModeReg | 0o644, Size: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("abc")); err == nil {
		t.Error("writing 3 bytes into a 2-byte entry succeeded")
	}
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(platform.CpioEntry{Name: "g", Mode: platform.ModeReg | 0o644}); err == nil {
		t.Error("a new entry began while one byte was missing")
	}
	if err := w.Close(); err == nil {
		t.Error("Close succeeded while one byte was missing")
	}
	for _, e := range []platform.CpioEntry{
		{Name: "", Mode: platform.ModeDir | 0o755},
		{Name: "/abs", Mode: platform.ModeDir | 0o755},
		{Name: "d", Mode: platform.ModeDir | 0o755, Size: 1},
	} {
		if err := platform.NewCpioWriter(new(bytes.Buffer)).WriteHeader(e); err == nil {
			t.Errorf("WriteHeader(%+v) succeeded", e)
		}
	}
}
