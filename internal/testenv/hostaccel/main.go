// Command hostaccel prints the accelerator the Go tests share
// (testenv.HostAccel: the KVM probe's verdict, probed once per host boot),
// so that the scripts that start `kibotos dev` for the SDKs' tests give it
// KIBOTOS_ACCEL instead of having it probe again (20 s on a host whose KVM
// crawls).
package main

import (
	"fmt"
	"os"

	"github.com/kibotos/kibotos/internal/testenv"
)

func main() {
	accel, err := testenv.HostAccel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostaccel:", err)
		os.Exit(1)
	}
	fmt.Println(accel)
}
