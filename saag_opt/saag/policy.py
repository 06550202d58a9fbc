"""The data-flow policy as data: effect kinds, argument roles, value kinds, and which sources may fill which roles.

``saag.flow`` applies it (no LM, no I/O); this module only states it, so that the policy reads as a
table and can be replaced without touching the rules (``Policy.from_dict`` reads the same shape
from JSON, ``Policy.to_dict`` writes it). Nothing here names a tool of a particular benchmark:
roles come from argument names and descriptions, effects from the verbs of a tool's name.

* **effects** (``EffectKind``): what a call does, read from the words of a tool's name (its
  description's first sentence when the name has no verb), and what a user's request asks for,
  read from its verbs. ``verbs`` ask for the effect in a request and name it in a tool's name;
  ``nouns`` name it in a tool's name only ("payment" in a request is no request to pay);
  ``ambiguous`` words are verbs in a request only where a verb stands (at the start of a sentence
  or clause, or after "please", "to", "and", "then", "can you", ...): "email Bob" asks to send,
  "the email from Bob" does not.
* **kinds** (``ValueKind``): values recognisable by their shape (an IBAN, an e-mail address, a
  URL, a date, a file name), found inside longer texts too; ``labels`` are the field names under
  which structured tool data holds such values (``sender``, ``recipient``, ``iban``, ``start_time``,
  ...). A ``dates`` kind is compared as the calendar date it is (``saag.dates``: ``2024-05-01`` is
  in a text that says "the 1st of May"); an ``in_text`` kind found inside free text (an address in
  a message body) is traced in its kind's role (``kind_roles``), the others only as whole arguments.
* **roles** (``Role``): what an argument decides (``recipient``, ``account``, ``email``, ``url``,
  ``date``, ``target``, ``amount``, ``secret``; ``content`` is free text whose embedded values are
  checked by their kind; ``object`` is any other short text a side effect acts on). The first role
  whose ``params`` pattern matches the parameter's name wins, else the first whose ``words`` occur
  in its description. ``sources`` says which sources may fill it:

  - ``user``: the user's messages; ``system``: the system messages;
  - ``field``: a whole field of a tool result's structured data (a JSON string, number, list item
    or key): data the agent copies, such as an id, a channel name, a transaction's sender;
  - ``named``: the text of a tool result the user's request names as the source for this role
    (see ``saag.flow``: the request names the result, and either mentions the role's ``words`` or,
    for an ``implied`` role, asks for the call's effect);
  - ``text``: the text of any other tool result (never allowed for a decisive role here but a
    date's: dates recur across unrelated texts);
  - ``replaced``: tool text, where the request states its own value of that kind
    (``stated_excludes``); allowed for no role;
  - ``derived``: found in no message: the agent composed or computed it (a sum, a summary).

  ``stated_excludes``: when the user's request itself states a value of the same kind (an IBAN, an
  address, a date, a file name), values of that kind from tool *text* do not fill the role (data
  fields still do): the user already said which one. A role no ``field`` may fill (``secret``)
  also guards the fields its ``words`` label ("Passport Number"): such a value copied into any
  argument of a side effect, a message body too, must come from where the request names its label.
  ``marked``: a value of the role that an instruction in tool text names is blocked unless the
  user gave it, even when it is data (``saag.injection``'s third marker rule): ids and dates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

__all__ = ["DEFAULT_POLICY", "SOURCE_NAMES", "EffectKind", "Policy", "Role", "SourceName", "ValueKind"]

SourceName = Literal["user", "system", "field", "named", "text", "replaced", "derived"]
"""Where a value was found, most trusted first (module docstring)."""
SOURCE_NAMES: tuple[SourceName, ...] = get_args(SourceName)

_DECISIVE: frozenset[SourceName] = frozenset({"user", "system", "field", "named", "derived"})


@dataclass(frozen=True)
class EffectKind:
    """One kind of side effect and the words that name it (module docstring)."""

    name: str
    verbs: tuple[str, ...]
    nouns: tuple[str, ...] = ()
    ambiguous: tuple[str, ...] = ()
    """Words that are verbs in a request only where a verb stands ("email Bob", not "the email")."""
    strict: bool = False
    """The request must name this kind itself (a verb or a noun) for a call of it to run on tool data alone
    (``saag.flow``'s ``unrequested effect``)."""
    covers: tuple[str, ...] = ()
    """Kinds a request for this one asks for too ("share the result on social media" asks to post it)."""


@dataclass(frozen=True)
class ValueKind:
    """Values recognisable by their shape, and the field names structured data keeps them under."""

    name: str
    pattern: str
    """A regular expression (case-insensitive unless it says ``(?-i:...)``) finding such values in text."""
    labels: tuple[str, ...] = ()
    compact: bool = False
    """Compared without spaces and dashes (IBANs are written in groups of four)."""
    dates: bool = False
    """Compared as calendar dates (``saag.dates``): ``2024-05-01`` is found where a text says "May 1st"."""
    in_text: bool = True
    """Values of this kind inside free text (a message body) are traced in the role of their kind
    (``Policy.kind_roles``); False: the kind matters only as a whole argument and as a stated kind."""


@dataclass(frozen=True)
class Role:
    """What an argument decides, how to recognise it, and which sources may fill it."""

    name: str
    params: tuple[str, ...] = ()
    """Regular expressions matched in full against the parameter's name (case-insensitive)."""
    words: tuple[str, ...] = ()
    """Words of a parameter's description that give the role, and words of a request that ask for it."""
    sources: frozenset[SourceName] = _DECISIVE
    decisive: bool = True
    """False for free text (``content``): not checked as a whole; the values of a kind inside it are."""
    implied: bool = True
    """A request that names a source and asks for the call's effect names it for this role too."""
    stated_excludes: bool = False
    """A value of a kind the request itself states does not come from tool text: found only there, its source
    is ``replaced`` (module docstring)."""
    marked: bool = False
    """A value of this role that an instruction in tool text names is not run unless the user gave it, even when
    it is data (``saag.injection``'s ``marked value``): ids and dates recur in data, so that the instruction
    names one is the evidence of who chose it. Off for names of people and places, which an injection shares
    with the user's own task by coincidence."""


@dataclass(frozen=True)
class Policy:
    """The whole policy; ``DEFAULT_POLICY`` is the one the guard applies."""

    effects: tuple[EffectKind, ...]
    read_verbs: tuple[str, ...]
    """First words of a tool's name that make it a read (``get_``, ``list_``, ``search_`` ...)."""
    kinds: tuple[ValueKind, ...]
    roles: tuple[Role, ...]
    kind_roles: Mapping[str, str] = field(default_factory=dict)
    """The role a value of a kind plays when it is found inside free text (an address in a message body)."""
    name_stopwords: tuple[str, ...] = ()
    """Words of a tool's name that do not name what it returns ("all", "for", "most", ...)."""

    def role(self, name: str) -> Role:
        """The role called ``name``.

        Raises:
            KeyError: no such role.
        """
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(f"no role {name!r} (roles: {', '.join(r.name for r in self.roles)})")

    def to_dict(self) -> dict[str, Any]:
        """The policy as plain JSON-able data (the shape ``from_dict`` reads)."""
        return {"effects": [vars(e) | {} for e in self.effects], "read_verbs": list(self.read_verbs),
                "kinds": [vars(k) | {} for k in self.kinds],
                "roles": [vars(r) | {"sources": sorted(r.sources, key=SOURCE_NAMES.index)} for r in self.roles],
                "kind_roles": dict(self.kind_roles), "name_stopwords": list(self.name_stopwords)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Read a policy from ``to_dict``'s shape (lists for tuples).

        Raises:
            ValueError: an unknown source name, or a missing or malformed entry.
        """
        try:
            roles = []
            for raw in data["roles"]:
                sources = frozenset(raw.get("sources", _DECISIVE))
                unknown = sources - set(SOURCE_NAMES)
                if unknown:
                    raise ValueError(f"role {raw.get('name')!r}: unknown source(s) {sorted(unknown)} "
                                     f"(known: {', '.join(SOURCE_NAMES)})")
                roles.append(Role(**{**raw, "params": tuple(raw.get("params", ())), "words": tuple(raw.get("words", ())),
                                     "sources": sources}))
            return cls(effects=tuple(EffectKind(e["name"], tuple(e["verbs"]), tuple(e.get("nouns", ())),
                                                tuple(e.get("ambiguous", ())), bool(e.get("strict")),
                                                tuple(e.get("covers", ())))
                                     for e in data["effects"]),
                       read_verbs=tuple(data["read_verbs"]),
                       kinds=tuple(ValueKind(k["name"], k["pattern"], tuple(k.get("labels", ())), bool(k.get("compact")),
                                             bool(k.get("dates")), bool(k.get("in_text", True)))
                                   for k in data["kinds"]),
                       roles=tuple(roles), kind_roles=dict(data.get("kind_roles", {})),
                       name_stopwords=tuple(data.get("name_stopwords", ())))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a policy: {exc!r}") from None


_TLDS = ("com|org|net|io|co|ai|app|dev|edu|gov|info|biz|me|ly|to|tv|us|uk|de|fr|ch|it|es|nl|eu|ca|au|jp|cn|in|ru|br|"
         "xyz|site|online|page|link|cloud|tech|store|blog|news")

DEFAULT_POLICY = Policy(
    effects=(
        EffectKind("delete", verbs=("delete", "remove", "erase", "cancel", "destroy", "wipe", "purge", "trash",
                                    "revoke", "unsubscribe", "retract", "annul", "withdraw", "abort", "void", "undo"),
                   nouns=("deletion", "removal", "cancellation"), ambiguous=("drop",), strict=True),
        EffectKind("pay", verbs=("pay", "transfer", "wire", "refund", "reimburse", "purchase", "buy", "charge",
                                 "donate"),
                   nouns=("payment", "transaction", "money", "checkout"), strict=True),
        EffectKind("share", verbs=("share", "grant"), nouns=("permission", "permissions"), covers=("send",)),
        EffectKind("invite", verbs=("invite",), nouns=("invitation",)),
        EffectKind("send", verbs=("send", "notify", "publish", "reply", "respond", "submit", "tweet", "inform"),
                   ambiguous=("email", "e-mail", "mail", "message", "post", "dm", "reach", "forward", "contact")),
        EffectKind("write", verbs=("create", "add", "update", "modify", "edit", "append", "write", "schedule",
                                   "reschedule", "reserve", "rename", "save", "adjust", "register", "enable", "disable",
                                   "reset", "replace", "insert", "upload", "store", "assign", "remind", "change",
                                   "move", "set", "copy", "navigate"),
                   nouns=("reservation", "booking"), ambiguous=("book", "make", "put")),
        EffectKind("egress", verbs=("visit", "open", "browse", "download", "fetch"), ambiguous=("go",)),
    ),
    read_verbs=("get", "list", "search", "find", "read", "fetch", "lookup", "look", "check", "show", "view", "query",
                "count", "retrieve", "calculate", "describe", "browse", "load", "download"),
    kinds=(
        ValueKind("iban", r"(?-i:\b[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]{4}){2,7}(?:[ -]?[A-Z0-9]{1,4})?\b)",
                  labels=("iban", "account", "accountnumber", "bankaccount", "sender", "recipient", "payee",
                          "beneficiary", "from", "to", "creditor", "debtor"), compact=True),
        ValueKind("email", r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
                  labels=("email", "emailaddress", "mail", "sender", "recipient", "recipients", "from", "to", "cc",
                          "bcc", "participants", "attendees", "invitees", "organizer", "organiser", "useremail")),
        ValueKind("url", r"(?:\bhttps?://[^\s\"'<>]+|\bwww\.[\w-]+(?:\.[\w-]+)+(?:/[^\s\"'<>]*)?"
                         r"|\b(?:[\w-]+\.)+(?:" + _TLDS + r")\b(?:/[^\s\"'<>]*)?)",
                  labels=("url", "uri", "link", "href", "website", "homepage", "webpage")),
        ValueKind("date", r"(?<![\d-])(?:19|20)\d\d-[01]?\d-[0-3]?\d(?:[T ][\d:.]+)?(?![\d-])",
                  labels=("date", "day", "start", "end", "starttime", "endtime", "startdate", "enddate", "deadline",
                          "duedate"), dates=True, in_text=False),
        ValueKind("filename", r"(?<![\w.-])[\w][\w.-]{0,80}?\.(?:txt|docx?|xlsx?|csv|pdf|pptx?|odt|ods|md|json|"
                              r"ya?ml|xml|html?|rtf|zip|png|jpe?g|gif|log|ini|cfg|py|js|sql)(?![\w.-])",
                  labels=("filename", "file", "filepath", "path", "document", "documentname"), in_text=False),
    ),
    roles=(
        Role("secret", params=(r"password", r"pass(?:word|code|phrase)", r"pin", r"(?:\w+_)?secret", r"(?:api_?)?key",
                               r"(?:access_|auth_)?token", r"credentials?", r"otp"),
             words=("password", "passcode", "pin", "secret", "credential", "credentials", "passport", "credit card",
                    "card number", "security code", "cvv", "cvc", "ssn", "social security"),
             sources=frozenset({"user", "system", "named", "derived"}), implied=False),
        Role("account", params=(r"iban", r"(?:\w+_)?account(?:_?(?:number|no|id))?", r"acct", r"payee", r"beneficiary"),
             words=("iban", "account", "bank account", "payee", "beneficiary"), stated_excludes=True),
        Role("email", params=(r"(?:\w+_)?e-?mails?(?:_?address(?:es)?)?", r"cc", r"bcc"),
             words=("email", "e-mail", "address", "mail"), stated_excludes=True),
        Role("url", params=(r"url", r"uri", r"link", r"href", r"website", r"web_?page", r"page", r"endpoint",
                            r"domain", r"\w+_url"),
             words=("url", "link", "links", "website", "websites", "webpage", "site", "page", "blog", "article"),
             implied=False, stated_excludes=True),
        Role("title", params=(r"title", r"\w+_title", r"headline"), words=("title", "titled", "called"),
             implied=False),
        Role("recipient", params=(r"recipients?", r"to", r"receivers?", r"addressees?", r"destination", r"participants?",
                                  r"attendees?", r"invitees?", r"guests?", r"members?", r"users?", r"user_?names?",
                                  r"usernames?", r"assignees?", r"contacts?", r"phone(?:_number)?", r"channels?",
                                  r"channel_name", r"chat(?:_id)?", r"group"),
             words=("recipient", "recipients", "addressee", "participant", "participants", "attendee", "member",
                    "user", "channel", "contact"), stated_excludes=True),
        Role("amount", params=(r"amount", r"sum", r"total", r"price", r"cost", r"fee", r"quantity", r"qty",
                               r"\w+_amount"),
             words=("amount", "sum", "price", "cost", "fee", "money", "pay", "refund", "difference")),
        Role("date", params=(r"(?:\w+_)?(?:date|day|time|datetime|timestamp)s?", r"start", r"end", r"deadline",
                             r"due", r"check_?(?:in|out)"),
             words=("date", "dates", "day", "deadline"), sources=_DECISIVE | {"text"}, stated_excludes=True,
             marked=True),
        Role("target", params=(r"ids?", r"\w+_ids?", r"path", r"\w+_path", r"file(?:_?name)?", r"document"),
             words=("file", "document", "event", "id", "identifier"), stated_excludes=True, marked=True),
        Role("content", params=(r"body", r"content", r"contents", r"text", r"message", r"msg", r"description", r"desc",
                                r"notes?", r"comments?", r"summary", r"subject", r"caption", r"bio",
                                r"reason", r"html", r"markdown", r"query", r"attachments?"),
             decisive=False),
        Role("object", params=(r".*",), words=()),
    ),
    kind_roles={"iban": "account", "email": "email", "url": "url"},
    name_stopwords=("all", "for", "by", "in", "of", "to", "the", "a", "an", "from", "with", "on", "most", "recent",
                    "new", "my", "user", "info", "information", "data", "details", "type", "types", "day"),
)
"""The policy the guard applies (module docstring). ``object`` matches every parameter no other role
took; ``content`` is not decisive (its embedded values are, by ``kind_roles``)."""
