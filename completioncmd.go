package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// completionTree holds the commands and what follows each, for the completion scripts.
var completionTree = map[string][]string{
	"":           {"serve", "rules", "keys", "users", "hook", "mcp", "export", "backup", "migrate", "completion", "version", "help"},
	"rules":      {"check", "test"},
	"keys":       {"create", "list", "revoke"},
	"users":      {"add", "list", "remove", "passwd"},
	"hook":       {"claude-code", "codex", "gemini", "cursor", "install"},
	"mcp":        {"wrap"},
	"completion": {"bash", "zsh", "fish"},
}

var flagLine = regexp.MustCompile(`^\s+-([a-z0-9-]+)`)

// serveFlags lists the guardian's flags as `vigil serve -h` prints them, so the scripts
// follow the flags wherever they are defined.
func serveFlags() []string {
	var out bytes.Buffer
	_, _ = parseConfig("serve", []string{"-h"}, &out)
	var flags []string
	for line := range strings.SplitSeq(out.String(), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags = append(flags, "--"+m[1])
		}
	}
	sort.Strings(flags)
	return flags
}

// runCompletion implements `vigil completion bash|zsh|fish`: a script to source.
func runCompletion(args []string, stdout, stderr io.Writer) int {
	const use = "usage: vigil completion bash|zsh|fish\n" +
		"  bash: source <(vigil completion bash)    (or save it in /etc/bash_completion.d/vigil)\n" +
		"  zsh:  vigil completion zsh > \"${fpath[1]}/_vigil\"\n" +
		"  fish: vigil completion fish > ~/.config/fish/completions/vigil.fish\n"
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprint(stdout, use)
		return 0
	}
	if len(args) != 1 {
		fmt.Fprint(stderr, use)
		return 2
	}
	flags := strings.Join(serveFlags(), " ")
	words := func(k string) string { return strings.Join(completionTree[k], " ") }
	switch args[0] {
	case "bash":
		fmt.Fprintf(stdout, `# bash completion for vigil
_vigil() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "%s %s" -- "$cur"))
        return
    fi
    case "$cmd" in
        rules) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "%s" -- "$cur")) || COMPREPLY=($(compgen -f -- "$cur")) ;;
        keys) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
        users) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
        hook) COMPREPLY=($(compgen -W "%s --guardian --timeout --on-guardian-error --project --user --uninstall" -- "$cur")) ;;
        mcp) COMPREPLY=($(compgen -W "%s --guardian --name --on-guardian-error --show-denied" -- "$cur")) ;;
        completion) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
        serve) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}
complete -F _vigil vigil
`, words(""), flags, words("rules"), words("keys"), words("users"), words("hook"), words("mcp"), words("completion"), flags)
	case "zsh":
		fmt.Fprintf(stdout, `#compdef vigil
# zsh completion for vigil
_vigil() {
    if (( CURRENT == 2 )); then
        compadd -- %s %s
        return
    fi
    case ${words[2]} in
        rules) (( CURRENT == 3 )) && compadd -- %s || _files ;;
        keys) compadd -- %s ;;
        users) compadd -- %s ;;
        hook) compadd -- %s --guardian --timeout --on-guardian-error --project --user --uninstall ;;
        mcp) compadd -- %s --guardian --name --on-guardian-error --show-denied ;;
        completion) compadd -- %s ;;
        serve) compadd -- %s ;;
        *) _files ;;
    esac
}
compdef _vigil vigil
`, words(""), flags, words("rules"), words("keys"), words("users"), words("hook"), words("mcp"), words("completion"), flags)
	case "fish":
		fmt.Fprintf(stdout, "# fish completion for vigil\ncomplete -c vigil -f\n")
		fmt.Fprintf(stdout, "complete -c vigil -n __fish_use_subcommand -a '%s'\n", words(""))
		for _, k := range []string{"rules", "keys", "users", "hook", "mcp", "completion"} {
			fmt.Fprintf(stdout, "complete -c vigil -n '__fish_seen_subcommand_from %s' -a '%s'\n", k, words(k))
		}
		for _, f := range serveFlags() {
			fmt.Fprintf(stdout, "complete -c vigil -n '__fish_seen_subcommand_from serve; or __fish_use_subcommand' -l %s\n", strings.TrimPrefix(f, "--"))
		}
	default:
		fmt.Fprintf(stderr, "vigil completion: unknown shell %q\n%s", args[0], use)
		return 2
	}
	return 0
}
