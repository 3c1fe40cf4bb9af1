"""Feature extraction: shapes, hostile input, buckets, token estimate, modality."""


import pytest

from aisia_plugin.features import RequestFeatures, extract_features, message_text


def user(content):
    return [{"role": "user", "content": content}]


def test_message_text_str_parts_and_odd_shapes():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "x"}},
                                     {"type": "input_audio", "input_audio": {"data": "..."}}, {"type": "weird", "text": "no"},
                                     {"type": "text", "text": 42}, "bare string part", None, 7]},
        {"role": "assistant", "content": None},
        "not a dict", None, 3.5, {"content": {"nested": "dict"}}, {"role": 5, "content": "odd role"},
    ]
    assert message_text(msgs) == "sys\nhello\nbare string part\nodd role"
    for odd in (None, "text", 5, {"role": "user"}, [None], [[]], [{"content": b"bytes"}], ({"content": "t"},)):
        assert isinstance(message_text(odd), str)


class Hostile(dict):
    def get(self, *a):
        raise RuntimeError("boom")


@pytest.mark.parametrize("messages", [
    None, 1, "x", b"bytes", [], [None], [1, 2], [{"role": "user"}], [{"role": "user", "content": 12}],
    [{"role": "user", "content": [{"type": "text"}]}], [{"role": "user", "content": [{"type": None, "text": None}]}],
    [{"role": "user", "content": [[["deep"]]]}], [Hostile()], [{"role": "user", "content": object()}],
    [{"role": "user", "content": "\ud800 lone surrogate"}],
])
def test_never_raises_on_odd_shapes(messages):
    f = extract_features(messages, tools={"not": "a list"}, request_modalities=123)
    assert isinstance(f, RequestFeatures)
    assert f.length_bucket in ("short", "medium", "long", "very_long")
    assert 0.0 <= f.specificity <= 1.0


def test_one_megabyte_prompt_is_bounded():
    big = "a" * 10**6 + "!"
    f = extract_features(user(big), max_chars=8000)
    assert len(f.text) <= 8001 and f.text.startswith("aaa") and f.text.endswith("!")
    assert f.input_tokens == len(big) // 4 and f.length_bucket == "very_long"
    g = extract_features(user("(" * 10**6 + "```"))
    assert g.has_code


def test_text_is_user_messages_latest_last():
    msgs = [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"}]
    f = extract_features(msgs)
    assert f.text == "first\nsecond"
    assert extract_features([{"role": "system", "content": "only system"}]).text == "only system"


@pytest.mark.parametrize("chars,bucket", [(0, "short"), (796, "short"), (800, "medium"), (7996, "medium"),
                                         (8000, "long"), (63996, "long"), (64000, "very_long")])
def test_length_buckets(chars, bucket):
    assert extract_features(user("x" * chars)).length_bucket == bucket


def test_token_estimate_text_images_tools():
    parts = [{"type": "text", "text": "x" * 400}, {"type": "image_url", "image_url": {"url": "u"}},
             {"type": "image_url", "image_url": {"url": "v"}}]
    f = extract_features(user(parts) + [{"role": "system", "content": "y" * 40}])
    assert f.input_tokens == 440 // 4 + 2 * 85
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    g = extract_features(user("x" * 400), tools=tools)
    assert g.has_tools and g.input_tokens > 100
    assert not extract_features(user("x"), tools=[]).has_tools
    # a self-referencing tool schema is walked with a bound, not forever
    loop = {"a": []}
    loop["a"].append(loop)
    assert extract_features(user("x"), tools=[loop]).has_tools


def test_modality_detection():
    img = {"type": "image_url", "image_url": {"url": "u"}}
    aud = {"type": "input_audio", "input_audio": {"data": "d", "format": "wav"}}
    assert extract_features(user("hi")).modality == "text"
    assert extract_features(user([img])).modality == "image"
    assert extract_features(user([aud])).modality == "audio"
    assert extract_features(user([{"type": "text", "text": "what is this"}, img])).modality == "mixed"
    assert extract_features(user([img, aud])).modality == "mixed"
    assert extract_features([]).modality == "text"


def test_requested_modalities():
    assert extract_features(user("Summarise this article")).requested_modalities == ("text",)
    assert extract_features(user("Generate an image of a red fox in the snow")).requested_modalities == ("image",)
    assert extract_features(user("Génère une image d'un chat")).requested_modalities == ("image",)
    assert extract_features(user("Use DALL-E for a logo")).requested_modalities == ("image",)
    assert extract_features(user("Describe this image")).requested_modalities == ("text",)
    assert extract_features(user("Convert this paragraph with text to speech")).requested_modalities == ("audio",)
    assert extract_features(user("Lis ce texte à voix haute")).requested_modalities == ("audio",)
    assert extract_features(user("hi"), request_modalities=["text", "audio"]).requested_modalities == ("text", "audio")
    assert extract_features(user("hi"), request_modalities=["Audio", "bogus", 3]).requested_modalities == ("audio",)
    assert extract_features(user("draw a picture of a cat"), request_modalities=[]).requested_modalities == ("image",)


def test_code_task_creative_realtime():
    f = extract_features(user("```python\ndef add(a, b):\n    return a + b\n```"))
    assert f.has_code and f.task_type == "coding"
    assert extract_features(user("Écris une fonction Python qui trie une liste")).task_type == "coding"
    assert extract_features(user("I get a Traceback with a KeyError, please fix it")).task_type == "debugging"
    assert extract_features(user("Corrige cette erreur dans mon script")).task_type == "debugging"
    assert extract_features(user("Please review my pull request")).task_type == "review"
    assert extract_features(user("Write the README documentation")).task_type == "documentation"
    assert extract_features(user("Make a roadmap for the migration")).task_type == "planning"
    assert extract_features(user("Compare these two offers")).task_type == "analysis"
    assert extract_features(user("Bonjour, ça va ?")).task_type == "default"
    assert not extract_features(user("The class of 2020 met in Paris.")).has_code
    assert extract_features(user("Write a poem about the sea")).is_creative
    assert extract_features(user("Écris un poème sur la mer")).is_creative
    assert not extract_features(user("What is the capital of France?")).is_creative
    assert extract_features(user("I need a quick answer")).is_realtime
    assert extract_features(user("Réponds rapidement stp")).is_realtime
    assert extract_features(user("real-time autocomplete for my editor")).is_realtime
    assert not extract_features(user("Explain photosynthesis")).is_realtime


def test_specificity_range_and_order():
    chat = extract_features(user("Hello, how are you today? I hope all is well with you.")).specificity
    tech = extract_features(user("Fix KeyError in pandas.DataFrame.merge(on=['id_x']) with pandas==2.1.4 "
                                 "and numpy 1.26 on python3.11; traceback: File 'etl/load_v2.py', line 42")).specificity
    assert 0.0 <= chat < 0.2 < tech <= 1.0
    assert extract_features(user("")).specificity == 0.0


def test_replace_and_defaults():
    f = extract_features(user("hi"))
    assert f.extra == {} and f.estimate_probability is False
    assert f.replace(estimate_probability=True).estimate_probability is True


# --- the fast paths of extract_features (construction, Set reading, class counts) ----------------

import pickle  # noqa: E402
from collections.abc import Mapping  # noqa: E402

from aisia_plugin import features as F  # noqa: E402


def test_features_are_built_by_keyword_and_copied_by_replace():
    f = extract_features(user("Fix this bug in my python code: print(x) ();"))
    assert type(f) is RequestFeatures
    assert f == RequestFeatures(**f.as_dict())
    assert list(f.as_dict()) == list(RequestFeatures.FIELDS)
    assert not hasattr(f, "__dict__")  # slotted: a misspelt attribute cannot be set
    with pytest.raises(TypeError):
        RequestFeatures("debugging")  # keyword only
    g = f.replace(extra={"plugin": 1})
    assert type(g) is RequestFeatures and g.extra == {"plugin": 1} and g.text == f.text and f.extra == {}
    assert g != f and f.replace() == f
    with pytest.raises(TypeError, match="txet"):
        f.replace(txet="typo")
    assert f.as_dict()["task_type"] == f.task_type == "debugging"
    assert pickle.loads(pickle.dumps(f)) == f
    assert "task_type='debugging'" in repr(f) and "specificity=" in repr(f)
    assert extract_features(user("hi")).extra is not extract_features(user("hi")).extra  # a fresh dict each time
    with pytest.raises(TypeError):
        hash(f)


def test_specificity_left_out_is_computed_on_first_read_and_kept():
    text = "Fix KeyError in pandas.DataFrame.merge(on=['id_x']) with pandas==2.1.4 traceback line 42 now"
    lazy = RequestFeatures(text=text, has_code=True)
    expected = F._specificity(text.encode(), True)
    assert lazy.specificity == expected > 0
    assert lazy == RequestFeatures(text=text, has_code=True, specificity=expected)
    assert RequestFeatures(text=text, specificity=0.25).specificity == 0.25  # given: kept as given
    assert extract_features(user(text)).specificity == F._specificity(text.encode(), extract_features(user(text)).has_code)
    # a lone surrogate is read as "?", as extract_features reads it
    assert RequestFeatures(text="\udc80 lone surrogate").specificity == F._specificity(b"? lone surrogate", False)


def _reference_specificity(raw: bytes, has_code: bool) -> float:
    """The straightforward form: every byte to its class letter, then count each class."""
    n = len(raw)
    classes = raw.translate(F._CLASSES)
    blanks = classes.count(b" ")
    if not n or blanks >= n:
        return 0.0
    n_words = blanks + 1
    symbols, digits = classes.count(b"S"), classes.count(b"D")
    mean_len = classes.count(b"L") / n_words
    score = (0.35 * min(1.0, symbols / n / 0.05) + 0.15 * min(1.0, digits / n / 0.05)
             + 0.30 * min(1.0, max(0.0, (mean_len - 4.0) / 4.0)) + (0.20 if has_code else 0.0))
    if n_words < 8:
        score *= n_words / 8
    return round(min(1.0, max(0.0, score)), 4)


@pytest.mark.parametrize("raw", [
    b"", b" ", b" \n\t\r\f\v", b"a", b"abcd efgh", b"0123456789", b"_(){}[]=<>/\\#$^*|~", b".,;:!?'\"-@%&+`",
    b"\x00\x01\x7f\x80\xff", bytes(range(256)), bytes(range(256)) * 3 + b" word" * 9,
    "é ü ß 漢字 😀 naïve café".encode(), b"x" * 5000, b"a b c d e f g", b"a b c d e f g h",
    b"verylongidentifier_with_underscores anotherlongword " * 8, b"1 + 2 = 3; x[i] == y(j) " * 20,
])
def test_specificity_matches_the_reference_counts(raw):
    for has_code in (False, True):
        assert F._specificity(raw, has_code) == _reference_specificity(raw, has_code)
    for b in range(256):  # every byte value, alone and inside words
        one = bytes([b])
        assert F._specificity(one, False) == _reference_specificity(one, False)
        mixed = b"word " + one + b" ab" + one * 3 + b"cd 12 (x)"
        assert F._specificity(mixed, True) == _reference_specificity(mixed, True)


@pytest.mark.parametrize("text,task,has_code", [
    # several task keywords: the first task of _TASK_NAMES wins, whatever their order in the text
    ("Explain and compare, then review, then debug it", "debugging", None),
    ("Analyze the design and write the docs", "documentation", None),
    ("analyze this, plan the roadmap", "planning", None),
    # weak code hints: 2 are not code, 3 are; a strong one alone is
    ("a = b and c == d", None, False),
    ("a = b and c == d -> e", None, True),
    ("x => y", None, True),
    ("a = b; c == d; e -> f", "coding", True),
])
def test_task_is_the_first_in_task_order_and_weak_code_needs_three_hints(text, task, has_code):
    f = extract_features(user(text))
    if task is not None:
        assert f.task_type == task
    if has_code is not None:
        assert f.has_code is has_code


def test_role_and_shapes_on_the_fast_and_the_generic_path():
    # a non-str role is not "user", for str content and for list content alike
    assert extract_features([{"role": 5, "content": "odd"}, {"role": "user", "content": "u"}]).text == "u"
    assert extract_features([{"role": 5, "content": [{"type": "text", "text": "odd"}]},
                             {"role": "user", "content": [{"type": "text", "text": "u"}]}]).text == "u"
    assert extract_features([{"role": 5, "content": [{"type": "text", "text": "odd"}]}]).text == "odd"

    class Msg(Mapping):  # a Mapping that is not a dict goes through the generic check
        def __init__(self, **kw):
            self._d = kw

        def __getitem__(self, k):
            return self._d[k]

        def __iter__(self):
            return iter(self._d)

        def __len__(self):
            return len(self._d)

    f = extract_features([Msg(role="user", content="from a mapping"), ({"role": "user"}), "str"])
    assert f.text == "from a mapping" and f.input_tokens == len("from a mapping") // 4
    assert extract_features(({"role": "user", "content": "t"},)).text == "t"  # a tuple of messages


@pytest.mark.parametrize("max_chars", [8000, 10, 7.9, True, "12", 10**9, 0, -3])
def test_max_chars_of_any_type_bounds_like_int(max_chars):
    text = "abcdefghij" * 5
    bound = max(2, int(max_chars))
    expect = text if len(text) <= bound else text[:bound // 2] + "\n" + text[-(bound // 2):]
    assert extract_features(user(text), max_chars=max_chars).text == expect
    with pytest.raises(ValueError):
        extract_features(user(text), max_chars="many")
