// Package guest is kibotos-guest, the first process of every Workspace VM:
// its init (PID 1: kernel file systems, modules, the storage overlay, zombie
// reaping, a clean power-off) and its agent (kibotos.guest.v1 over the
// virtio-serial port named guestchan.PortName).
//
// Outside a VM (not PID 1) only the agent runs, on a port path or a unix
// socket given to it, so that it can be exercised without one.
package guest
