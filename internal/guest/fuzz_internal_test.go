package guest

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// fuzzTree is a guest root beside a directory it must never reach, with
// symbolic links of every kind: relative and absolute, inside and out,
// dangling, looping. Two more links, root/L and root/dir/M, point where
// each fuzz input says.
func fuzzTree(f *testing.F) (root, outside string) {
	base := f.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/dir/sub", outside + "/dir"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for _, file := range []string{root + "/file", root + "/dir/file", outside + "/secret"} {
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"in": "dir", "abs-in": root + "/dir", "up": "..", "dir/up": "..", "dir/upup": "../..", "esc": outside, "esc-rel": "../outside",
		"esc-abs": "/", "dangling-in": "missing", "dangling-out": outside + "/new", "dangling-out-rel": "../outside/new",
		"dir/loop": "loop", "dir/via": "../esc/dir",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			f.Fatal(err)
		}
	}
	return root, outside
}

// resolve is where a create of p would land, read off the file system one
// component at a time as the kernel walks it: every link is followed,
// dangling ones too (a create through a dangling link makes its target),
// and missing components are taken as named. ok is false when the walk
// reaches nothing (a loop, ".." after a missing component, a
// non-directory component with more to walk).
func resolve(p string) (string, bool) {
	todo := strings.Split(p, "/")
	cur, hops := "/", 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		switch {
		case err != nil:
			// Missing: the rest is made as named (create_parents), and
			// a ".." in it would fail (ENOENT).
			for _, c := range todo {
				if c == ".." {
					return "", false
				}
			}
			return filepath.Join(append([]string{next}, todo...)...), true
		case fi.Mode()&os.ModeSymlink != 0:
			if hops++; hops > 40 {
				return "", false // ELOOP
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", false
			}
			if strings.HasPrefix(target, "/") {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
		case !fi.IsDir() && len(strings.Trim(strings.Join(todo, "/"), "/.")) > 0:
			return "", false // ENOTDIR
		default:
			cur = next
		}
	}
	return cur, true
}

func within(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// FuzzGuestPath: for any request path, and whatever two links in the
// guest's root point to, guestPath never panics and refuses only with
// invalid_argument. A path it accepts is absolute and clean, maps to the
// same path under the root and back (guestName), and neither it nor
// anything a create through it would make is outside the root, links
// (dangling ones included) followed. A path refused for resolving outside
// the root does resolve outside.
func FuzzGuestPath(f *testing.F) {
	root, outside := fuzzTree(f)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{
		"/", "/file", "/dir/file", "/in/file", "/abs-in/sub", "/up", "/up/outside/secret", "/dir/up/file", "/dir/upup/outside",
		"/esc", "/esc/secret", "/esc-rel/secret", "/esc-abs/etc/passwd", "/dangling-in", "/dangling-out", "/dangling-out-rel",
		"/dangling-out/x", "/dir/loop", "/dir/loop/x", "/dir/via", "/dir/via/x", "/L", "/L/x", "/dir/M", "/dir/M/x", "/new",
		"", "relative", "/a/../b", "/a/", "//a", "/a/.", "/\x00", "/\xff",
	} {
		f.Add("dir", "../file", p)
	}
	f.Add("/", "../../outside", "/L/x")
	f.Add("../outside/new", "../../outside/new", "/dir/M")
	f.Add("L", "M", "/L")
	f.Add("dir/M", "../L", "/dir/M/x")
	f.Add("missing/../../outside", "../file/../../outside", "/L")
	a := &Agent{Root: root}
	f.Fuzz(func(t *testing.T, target1, target2, p string) {
		for name, target := range map[string]string{"L": target1, "dir/M": target2} {
			link := filepath.Join(root, name)
			if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if target != "" && !strings.ContainsRune(target, 0) {
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
			}
		}
		host, err := a.guestPath("path", p)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("guestPath(%q): %v; want invalid_argument", p, err)
			}
			if strings.Contains(err.Error(), "resolves outside") {
				if r, ok := resolve(host0(root, p)); ok && within(r, realRoot) {
					t.Fatalf("guestPath(%q) refused as outside the root; it resolves to %s", p, r)
				}
			}
			return
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			t.Fatalf("guestPath accepted %q, not an absolute clean path", p)
		}
		if host != host0(root, p) || !within(host, root) {
			t.Fatalf("guestPath(%q) = %s; want %s", p, host, host0(root, p))
		}
		if back := a.guestName(host); back != p {
			t.Fatalf("guestName(guestPath(%q)) = %q", p, back)
		}
		if r, ok := resolve(host); ok && !within(r, realRoot) {
			t.Fatalf("guestPath(%q) accepted %s, which resolves to %s outside the root %s (outside: %s)", p, host, r, realRoot, outside)
		}
	})
}

func host0(root, p string) string { return filepath.Join(root, p) }
