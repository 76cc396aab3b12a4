package clikit

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// durationForm is what a duration flag takes, as its errors say.
const durationForm = "a duration such as 90s, 15m or 2h, or a number of seconds"

// seconds is a duration flag's value: Go's form (90s, 1h30m), or a bare
// number, which is seconds — what `--ttl 600` means to anyone who has not
// read time.ParseDuration's documentation.
type seconds struct{ d time.Duration }

func (s *seconds) Set(v string) error {
	d, err := ParseDuration(v)
	if err != nil {
		return err
	}
	s.d = d
	return nil
}

func (s *seconds) String() string {
	if s == nil {
		return ""
	}
	return s.d.String()
}

// ParseDuration reads a duration flag's value.
func ParseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 || n > float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("%q is out of range: want %s", v, durationForm)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not %s", v, durationForm)
	}
	return d, nil
}

// DurationFlag is a flag holding a duration (read with Duration), given
// as ParseDuration takes it; env, if any, are its environment variables.
func DurationFlag(name string, value time.Duration, usage string, env ...string) cli.Flag {
	return &cli.GenericFlag{Name: name, EnvVars: env, Value: &seconds{value}, Usage: usage, DefaultText: value.String()}
}

// Duration is the value of a DurationFlag.
func Duration(c *cli.Context, name string) time.Duration {
	if s, ok := c.Generic(name).(*seconds); ok {
		return s.d
	}
	return 0
}
