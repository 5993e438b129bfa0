package auth

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// CLI runs the `vigil keys …` and `vigil users …` commands against a database file. They
// work while a server uses the same file: it sees new keys at once and revocations within
// its refresh interval; account changes apply to its next request.
type CLI struct {
	// DefaultDB is the database used without --db.
	DefaultDB string
	// Open opens the database named by --db (main picks the backend from it) for the
	// subcommands that change it; the CLI closes what it returns.
	Open func(ctx context.Context, db string, log *slog.Logger) (ClosableStore, error)
	// OpenLister opens the database for `keys list` and `users list`, which only read: main
	// opens PostgreSQL read-only there, so that a listing never creates or migrates a schema
	// and a role that may only SELECT can run it. Nil: Open.
	OpenLister func(ctx context.Context, db string, log *slog.Logger) (Lister, error)
	// Stdin supplies passwords: read without echo after a prompt when it is a terminal,
	// else its first line.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Operator is who the audit log names for changes made here.
	Operator string
	// BcryptCost of new password hashes (default bcrypt.DefaultCost).
	BcryptCost int
	Now        func() time.Time
}

const keysUsage = `usage:
  vigil keys create [--agent ID] [--name NAME] [--expires 720h|30d] [--db PATH]
      create an API key and print it once (on standard output; the rest goes to stderr)
  vigil keys list [--db PATH]
  vigil keys revoke ID [--db PATH]
`

const usersUsage = `usage:
  vigil users add NAME --role viewer|reviewer|admin [--db PATH]
      the password is read from standard input (prompted without echo on a terminal)
  vigil users list [--db PATH]
  vigil users remove NAME [--db PATH]
  vigil users passwd NAME [--db PATH]
`

// parseInterspersed parses flags that may come before or after positional arguments
// (vigil users add alice --role admin) and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// ClosableStore is a Store the CLI opened and must close.
type ClosableStore interface {
	Store
	Close() error
}

// Lister is what the listings read, and all they may do: nothing in it changes the
// database, so a handle opened read-only serves it (postgres.ReadOnly).
type Lister interface {
	APIKeys(ctx context.Context) ([]record.APIKey, error)
	Users(ctx context.Context) ([]record.User, error)
	Close() error
}

func (c *CLI) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (c *CLI) open(ctx context.Context, path string) (ClosableStore, *Auth, error) {
	if c.Open == nil {
		return nil, nil, errors.New("no database backend configured")
	}
	log := c.logger()
	db, err := c.Open(ctx, path, log)
	if err != nil {
		return nil, nil, err
	}
	a, err := New(ctx, Config{BcryptCost: c.BcryptCost}, Options{Store: db, Logger: log, Now: c.Now})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, a, nil
}

func (c *CLI) openLister(ctx context.Context, path string) (Lister, error) {
	if c.OpenLister != nil {
		return c.OpenLister(ctx, path, c.logger())
	}
	if c.Open == nil {
		return nil, errors.New("no database backend configured")
	}
	return c.Open(ctx, path, c.logger())
}

func (c *CLI) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// run parses a subcommand's flags, opens the database and runs fn; it returns the exit code.
func (c *CLI) run(ctx context.Context, name, usage string, args []string, setup func(*flag.FlagSet),
	npos int, fn func(a *Auth, pos []string) error) int {
	return c.runPrepared(ctx, name, usage, args, setup, npos, nil, fn)
}

// runPrepared is run with prepare called before the database is opened: what waits for a
// person (a password prompt) must not hold the database, whose lock keeps a guardian from
// starting meanwhile.
func (c *CLI) runPrepared(ctx context.Context, name, usage string, args []string, setup func(*flag.FlagSet),
	npos int, prepare func(pos []string) error, fn func(a *Auth, pos []string) error) int {
	dbPath, pos, code, ok := c.parse(name, usage, args, setup, npos)
	if !ok {
		return code
	}
	if prepare != nil {
		if err := prepare(pos); err != nil {
			return c.exit(name, err)
		}
	}
	db, a, err := c.open(ctx, dbPath)
	if err != nil {
		fmt.Fprintf(c.Stderr, "vigil %s: %v\n", name, err)
		return 1
	}
	err = fn(a, pos)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return c.exit(name, err)
}

// list runs a listing (no arguments but --db): fn reads through OpenLister's handle.
func (c *CLI) list(ctx context.Context, name, usage string, args []string, fn func(l Lister) error) int {
	dbPath, _, code, ok := c.parse(name, usage, args, nil, 0)
	if !ok {
		return code
	}
	l, err := c.openLister(ctx, dbPath)
	if err != nil {
		fmt.Fprintf(c.Stderr, "vigil %s: %v\n", name, err)
		return 1
	}
	err = fn(l)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return c.exit(name, err)
}

// parse parses a subcommand's flags and npos positional arguments. ok is false when the
// command ends here, with exit code code (help, or a usage error already reported).
func (c *CLI) parse(name, usage string, args []string, setup func(*flag.FlagSet), npos int) (dbPath string, pos []string, code int, ok bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() { fmt.Fprint(c.Stderr, usage) }
	db := fs.String("db", c.DefaultDB, "SQLite database file")
	if setup != nil {
		setup(fs)
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", nil, 0, false
		}
		return "", nil, 2, false
	}
	if len(pos) != npos {
		fmt.Fprintf(c.Stderr, "vigil %s: expected %d argument(s), got %d\n%s", name, npos, len(pos), usage)
		return "", nil, 2, false
	}
	return *db, pos, 0, true
}

// exit reports err, if any, and returns the exit code: 2 for what the operator asked
// wrongly, 1 for other failures.
func (c *CLI) exit(name string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(c.Stderr, "vigil %s: %v\n", name, cliError(err))
	if errors.Is(err, ErrInvalid) {
		return 2
	}
	return 1
}

// cliError words the errors an operator can act on.
func cliError(err error) string {
	switch {
	case errors.Is(err, record.ErrExists):
		return "an account with that name already exists"
	case errors.Is(err, record.ErrNotFound):
		return "not found"
	case errors.Is(err, record.ErrLastAdmin):
		return record.ErrLastAdmin.Error() + "; make another account admin first"
	}
	return err.Error()
}

// Keys runs `vigil keys create|list|revoke` and returns the exit code.
func (c *CLI) Keys(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.Stderr, keysUsage)
		return 2
	}
	switch args[0] {
	case "create":
		var agent, name, expires string
		return c.run(ctx, "keys create", keysUsage, args[1:], func(fs *flag.FlagSet) {
			fs.StringVar(&agent, "agent", "", "agent id the key may speak as (empty: any agent)")
			fs.StringVar(&name, "name", "", "a label for the key")
			fs.StringVar(&expires, "expires", "", "lifetime, e.g. 720h or 30d (default: never)")
		}, 0, func(a *Auth, _ []string) error {
			life, err := ParseLifetime(expires)
			if err != nil {
				return err
			}
			k, secret, err := a.CreateKey(ctx, KeySpec{Name: name, AgentID: agent, ExpiresIn: life}, c.Operator)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.Stdout, secret)
			scope := "any agent"
			if agent != "" {
				scope = "agent " + agent
			}
			exp := "never expires"
			if k.ExpiresAt != nil {
				exp = "expires " + k.ExpiresAt.Format(time.RFC3339)
			}
			fmt.Fprintf(c.Stderr, "Created key %s for %s (%s).\nIt is shown only now: store it in the agent's secrets. "+
				"Agents send it as: Authorization: Bearer <key>\n", k.ID, scope, exp)
			if agent == "" {
				fmt.Fprintln(c.Stderr, "Note: the key is not scoped; use --agent ID to let it speak only as one agent.")
			}
			return nil
		})
	case "list":
		return c.list(ctx, "keys list", keysUsage, args[1:], func(l Lister) error {
			rows, err := l.APIKeys(ctx)
			if err != nil {
				return fmt.Errorf("auth: load api keys: %w", err)
			}
			now := c.now()
			ks := make([]Key, len(rows))
			for i, k := range rows {
				ks[i] = keyViewAt(k, now)
			}
			if len(ks) == 0 {
				fmt.Fprintln(c.Stderr, "No API keys: agents may call /aos without one (on loopback).")
				return nil
			}
			tw := tabwriter.NewWriter(c.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tAGENT\tSTATUS\tCREATED\tEXPIRES\tLAST USED")
			for _, k := range ks {
				agent := k.AgentID
				if agent == "" {
					agent = "*"
				}
				fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, dash(k.Name), agent,
					k.Status, k.CreatedAt.Local().Format(time.DateTime), optFormat(k.ExpiresAt), optFormat(k.LastUsedAt))
			}
			return tw.Flush()
		})
	case "revoke":
		return c.run(ctx, "keys revoke", keysUsage, args[1:], nil, 1, func(a *Auth, pos []string) error {
			k, err := a.RevokeKey(ctx, pos[0], c.Operator)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "Revoked key %s at %s.\n", k.ID, k.RevokedAt.Local().Format(time.DateTime))
			return nil
		})
	case "help", "-h", "--help":
		fmt.Fprint(c.Stdout, keysUsage)
		return 0
	}
	fmt.Fprintf(c.Stderr, "vigil keys: unknown command %q\n%s", args[0], keysUsage)
	return 2
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func optFormat(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// Users runs `vigil users add|list|remove|passwd` and returns the exit code.
func (c *CLI) Users(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.Stderr, usersUsage)
		return 2
	}
	switch args[0] {
	case "add":
		var role, pw string
		return c.runPrepared(ctx, "users add", usersUsage, args[1:], func(fs *flag.FlagSet) {
			fs.StringVar(&role, "role", "", "viewer, reviewer or admin")
		}, 1, func(pos []string) error {
			if !ValidRole(role) {
				return fmt.Errorf("%w: --role must be viewer, reviewer or admin", ErrInvalid)
			}
			if err := checkName(pos[0]); err != nil {
				return err
			}
			var err error
			pw, err = c.readPassword("Password for " + pos[0])
			return err
		}, func(a *Auth, pos []string) error {
			u, err := a.AddUser(ctx, pos[0], role, pw, c.Operator)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "Added %s (%s). The console now asks operators to sign in.\n", u.Name, u.Role)
			return nil
		})
	case "list":
		return c.list(ctx, "users list", usersUsage, args[1:], func(l Lister) error {
			us, err := l.Users(ctx)
			if err != nil {
				return err
			}
			if len(us) == 0 {
				fmt.Fprintln(c.Stderr, "No operator accounts: the console is open on loopback only.")
				return nil
			}
			tw := tabwriter.NewWriter(c.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tPASSWORD CHANGED")
			for _, u := range us {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, u.Role, u.CreatedAt.Local().Format(time.DateTime),
					u.UpdatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		})
	case "remove":
		return c.run(ctx, "users remove", usersUsage, args[1:], nil, 1, func(a *Auth, pos []string) error {
			u, err := a.RemoveUser(ctx, pos[0], c.Operator, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "Removed %s; their sessions have ended.\n", u.Name)
			return nil
		})
	case "passwd":
		var pw string
		return c.runPrepared(ctx, "users passwd", usersUsage, args[1:], nil, 1, func(pos []string) error {
			var err error
			pw, err = c.readPassword("New password for " + pos[0])
			return err
		}, func(a *Auth, pos []string) error {
			if err := a.SetPassword(ctx, pos[0], pw, c.Operator); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "Changed the password of %s; their sessions have ended.\n", pos[0])
			return nil
		})
	case "help", "-h", "--help":
		fmt.Fprint(c.Stdout, usersUsage)
		return 0
	}
	fmt.Fprintf(c.Stderr, "vigil users: unknown command %q\n%s", args[0], usersUsage)
	return 2
}

// maxPasswordInput bounds what is read as a password.
const maxPasswordInput = 1024

// readPassword reads a password: on a terminal twice without echo, else the first line of
// standard input.
func (c *CLI) readPassword(prompt string) (string, error) {
	if f, ok := c.Stdin.(*os.File); ok && isTerminal(int(f.Fd())) {
		fmt.Fprint(c.Stderr, prompt+": ")
		first, err := readPasswordNoEcho(int(f.Fd()))
		fmt.Fprintln(c.Stderr)
		if err != nil {
			return "", err
		}
		fmt.Fprint(c.Stderr, "Repeat it: ")
		second, err := readPasswordNoEcho(int(f.Fd()))
		fmt.Fprintln(c.Stderr)
		if err != nil {
			return "", err
		}
		if string(first) != string(second) {
			return "", fmt.Errorf("%w: the passwords differ", ErrInvalid)
		}
		return strings.TrimRight(string(first), "\r"), nil
	}
	if c.Stdin == nil {
		return "", fmt.Errorf("%w: no password given on standard input", ErrInvalid)
	}
	line, err := bufio.NewReader(io.LimitReader(c.Stdin, maxPasswordInput)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("%w: no password given on standard input", ErrInvalid)
	}
	return line, nil
}
