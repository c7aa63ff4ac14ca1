"""Untrusted text in a prompt stays data.

The texts the judge grades (the user's query, context documents, the response) come from
whoever calls Assay, and may be written to steer the judge. Two things keep them data:

1. **An envelope.** Each text goes inside its own tagged block (`<response>` ... `</response>`),
   and the system prompt says that everything inside such blocks is material to judge, never
   instructions. Inside a text, anything that would open or close one of our blocks
   (`</response>`, `<instructions>`, also with spaces or full-width brackets) has its `<`
   written as `&lt;`, so a text cannot end its block early or forge the rubric's.
2. **No control tokens.** Servers apply a chat template and tokenize the result with special
   tokens on, so `<|im_end|><|im_start|>system` inside a response would become a real system
   turn. Chat-template control tokens and their lookalikes (`<|...|>` in any model family's
   spelling, `[INST]`, `<<SYS>>`, `<start_of_turn>`, `<s>`, `<think>`, ...) are rewritten
   with parentheses, `(im_start)`, `(INST)`, which no template treats as special: the judge
   still sees that the text tried, and nothing in it can open a turn.
"""

from __future__ import annotations

import re

#: Our block names: the data blocks and the rubric's. Inside data none of them may open/close.
DATA_TAGS = ("user_query", "context_document", "response")
RUBRIC_TAG = "instructions"

_OPEN = "<\uff1c\ufe64\u2039\u3008"  # < and look-alikes: full-width, small, single angle quotes
_CLOSE = ">\uff1e\ufe65\u203a\u3009"
_BAR = "|\uff5c\u2502"  # | and look-alikes (DeepSeek's tokens use the full-width bar)

#: A control token in any common family's spelling; group "name" is what is kept.
_CONTROL = re.compile(
    # <|im_start|>, <|eot_id|>, <|start_header_id|>, <｜User｜>, <|channel|> ...
    rf"[{_OPEN}]\s*[{_BAR}]\s*(?P<bar>[^{_OPEN}{_CLOSE}{_BAR}\n]{{0,64}}?)\s*[{_BAR}]\s*[{_CLOSE}]"
    # [INST], [/INST], [SYSTEM_PROMPT], [TOOL_CALLS] (Mistral)
    r"|\[\s*(?P<square>/?\s*(?:INST|SYS|SYSTEM_PROMPT|AVAILABLE_TOOLS|TOOL_CALLS|TOOL_RESULTS)"
    r"\s*)\]"
    # <<SYS>>, <</SYS>> (Llama 2)
    rf"|[{_OPEN}]{{2}}\s*(?P<double>/?\s*SYS)\s*[{_CLOSE}]{{2}}"
    # <start_of_turn>, <end_of_turn> (Gemma), <s>, </s>, <bos>, <eos>, <think> ...
    rf"|[{_OPEN}]\s*(?P<angle>/?\s*(?:start_of_turn|end_of_turn|s|bos|eos|eot|pad|unk|think))"
    rf"\s*[{_CLOSE}]",
    re.IGNORECASE,
)

_TAG_NAMES = "|".join((*DATA_TAGS, RUBRIC_TAG))
#: The opening bracket of anything that reads as one of our tags: `<response`, `< /response`.
_OUR_TAG = re.compile(rf"[{_OPEN}](?=\s*/?\s*(?:{_TAG_NAMES})\b)", re.IGNORECASE)


def neutralise(text: str) -> str:
    """`text` with control tokens rewritten as `(name)` and our tags' brackets escaped."""
    without_controls = _CONTROL.sub(_rewrite, text)
    return _OUR_TAG.sub("&lt;", without_controls)


_SPACE = re.compile(r"\s+")


def _rewrite(match: re.Match[str]) -> str:
    name = next(group for group in match.groups() if group is not None)
    return f"({_SPACE.sub('', name)})"


def data_block(tag: str, text: str, attributes: str = "") -> str:
    """`text`, neutralised, inside the block `<tag attributes>` ... `</tag>`."""
    return f"<{tag}{attributes}>\n{neutralise(text)}\n</{tag}>"
