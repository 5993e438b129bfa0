# Four rules of bench/rules-realistic.yaml in Rego, for the OPA comparison of make bench
# (bench/opa): the same tests on the same steps, answered as Vigil answers them.
package vigil

import rego.v1

# inputs maps each tool input's name to its value (Vigil's `inputs`).
inputs[x.name] := x.value if some x in input.toolCallRequest.inputs

# texts are the lines of Vigil's `text` of a tool call that a text rule can match here:
# "name=value" for each input with a string value.
texts contains concat("=", [x.name, x.value]) if {
	some x in input.toolCallRequest.inputs
	is_string(x.value)
}

# shell-00: inputs.command matches "rm\\s+-(rf|fr)\\s+/" && tool == "run_shell"
hold contains "shell-00" if {
	input.toolCallRequest.toolId == "run_shell"
	regex.match(`rm\s+-(rf|fr)\s+/`, inputs.command)
}

# inject-00: text matches "(?i)ignore (all )?(previous|prior|above) instructions"
deny contains "inject-00" if {
	some t in texts
	regex.match(`(?i)ignore (all )?(previous|prior|above) instructions`, t)
}

# exfil-04: any(urls(inputs.body), domain(#) endsWith ".onion")
hold contains "exfil-04" if {
	is_string(inputs.body)
	some m in regex.find_all_string_submatch_n(`(?i)https?://([^/\s"'<>:]+)`, inputs.body, -1)
	endswith(lower(m[1]), ".onion")
}

# misc-00: tool == "transfer_funds" && inputs.amount > 50000
hold contains "misc-00" if {
	input.toolCallRequest.toolId == "transfer_funds"
	inputs.amount > 50000
}

decision := "deny" if count(deny) > 0
else := "hold" if count(hold) > 0
else := "allow"
