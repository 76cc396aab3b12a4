package clikit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// bytesForm is what a size flag takes, as its errors say.
const bytesForm = "a size such as 500M, 2G, 64K or a number of bytes"

// size is a size flag's value: a number of bytes, or one with a K, M or G
// suffix (powers of 1024), so that every size flag takes `500M`.
type size struct{ n int64 }

func (s *size) Set(v string) error {
	n, err := ParseBytes(v)
	if err != nil {
		return err
	}
	s.n = n
	return nil
}

func (s *size) String() string {
	if s == nil {
		return ""
	}
	return HumanBytes(s.n)
}

// ParseBytes reads a size flag's value.
func ParseBytes(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	num, mult := strings.ToUpper(v), int64(1)
	if unit := strings.TrimSuffix(strings.TrimSuffix(num, "B"), "I"); unit != num && unit != "" && strings.ContainsAny(unit[len(unit)-1:], "KMG") {
		num = unit // 10MiB, 10MB: 10M
	}
	switch num[len(num)-1:] {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		num = num[:len(num)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not %s", v, bytesForm)
	}
	return n * mult, nil
}

// HumanBytes is n as a size flag would take it: the largest of G, M and
// K that divides it, else bytes.
func HumanBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// BytesFlag is a flag holding a size (read with Bytes), given as
// ParseBytes takes it; env, if any, are its environment variables.
func BytesFlag(name string, value int64, usage string, env ...string) cli.Flag {
	text := HumanBytes(value)
	if value == 0 {
		text = "none"
	}
	return &cli.GenericFlag{Name: name, EnvVars: env, Value: &size{value}, Usage: usage, DefaultText: text}
}

// Bytes is the value of a BytesFlag.
func Bytes(c *cli.Context, name string) int64 {
	if s, ok := c.Generic(name).(*size); ok {
		return s.n
	}
	return 0
}
