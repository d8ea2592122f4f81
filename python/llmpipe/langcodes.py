"""Language labels normalised to ISO 639-3 plus ISO 15924 script: ``eng_Latn``, ``cmn_Hani``.

Detectors name languages differently: fastText's lid.176 uses ISO 639-1 where one exists
(``__label__en``) and Wikipedia codes elsewhere (``__label__als``), GlotLID and OpenLID already use
``eng_Latn``, whatlang ISO 639-3 without a script. :func:`normalize` maps all of them onto one form,
taking the language's usual script when the label has none, so that keep lists, thresholds and
per-language settings are written once.

    >>> normalize("__label__en"), normalize("__label__eng_Latn"), normalize("rus")
    ('eng_Latn', 'eng_Latn', 'rus_Cyrl')
"""

from __future__ import annotations

import re

# ISO 639-1 -> ISO 639-3. Where 639-3 has a macrolanguage and an individual language, the code is
# the one whatlang reports (Mandarin cmn, Persian pes, Bokmal nob), so both backends agree.
_ISO1 = """
aa:aar ab:abk af:afr ak:aka am:amh an:arg ar:ara as:asm av:ava ay:aym az:aze ba:bak be:bel bg:bul bh:bih bi:bis
bm:bam bn:ben bo:bod br:bre bs:bos ca:cat ce:che ch:cha co:cos cr:cre cs:ces cu:chu cv:chv cy:cym
da:dan de:deu dv:div dz:dzo ee:ewe el:ell en:eng eo:epo es:spa et:est eu:eus fa:pes ff:ful fi:fin
fj:fij fo:fao fr:fra fy:fry ga:gle gd:gla gl:glg gn:grn gu:guj gv:glv ha:hau he:heb hi:hin ho:hmo
hr:hrv ht:hat hu:hun hy:hye hz:her ia:ina id:ind ie:ile ig:ibo ii:iii ik:ipk io:ido is:isl it:ita
iu:iku ja:jpn jv:jav ka:kat kg:kon ki:kik kj:kua kk:kaz kl:kal km:khm kn:kan ko:kor kr:kau ks:kas
ku:kur kv:kom kw:cor ky:kir la:lat lb:ltz lg:lug li:lim ln:lin lo:lao lt:lit lu:lub lv:lav mg:mlg
mh:mah mi:mri mk:mkd ml:mal mn:mon mr:mar ms:msa mt:mlt my:mya na:nau nb:nob nd:nde ne:nep ng:ndo
nl:nld nn:nno no:nob nr:nbl nv:nav ny:nya oc:oci oj:oji om:orm or:ori os:oss pa:pan pi:pli pl:pol
ps:pus pt:por qu:que rm:roh rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd se:sme sg:sag sh:hbs
si:sin sk:slk sl:slv sm:smo sn:sna so:som sq:sqi sr:srp ss:ssw st:sot su:sun sv:swe sw:swa ta:tam
te:tel tg:tgk th:tha ti:tir tk:tuk tl:tgl tn:tsn to:ton tr:tur ts:tso tt:tat tw:twi ty:tah ug:uig
uk:ukr ur:urd uz:uzb ve:ven vi:vie vo:vol wa:wln wo:wol xh:xho yi:yid yo:yor za:zha zh:cmn zu:zul
"""

# three-letter labels of lid.176 that are Wikipedia codes rather than ISO 639-3
WIKI_TO_3 = {"als": "gsw", "zh_classical": "lzh", "zh_yue": "yue", "bat_smg": "sgs", "fiu_vro": "vro"}

# CLD2's codes (pycld2) that are not ISO 639-1/639-3 or whose script is not the usual one: old ISO
# 639-1 codes (iw, jw), CLD2's own (xx-Bugi, zzp: Pig Latin, un: unknown); Traditional Chinese is
# Han script like Simplified (ISO 15924 Hani covers both)
CLD2_CODES = {
    "iw": "heb", "jw": "jav", "zh-Hant": "cmn_Hani", "syr": "syr_Syrc", "chr": "chr_Cher",
    "lif": "lif_Limb", "xx-Bugi": "bug_Bugi", "xx-Goth": "got_Goth", "zzp": "und", "un": "und",
    "sr-ME": "srp_Latn",
}  # fmt: skip

# the usual script of languages not written in Latin script (ISO 15924); every other language: Latn
_SCRIPTS = """
rus:Cyrl ukr:Cyrl bel:Cyrl bul:Cyrl mkd:Cyrl srp:Cyrl kaz:Cyrl kir:Cyrl tgk:Cyrl mon:Cyrl bak:Cyrl
chv:Cyrl che:Cyrl ava:Cyrl oss:Cyrl sah:Cyrl tat:Cyrl tyv:Cyrl bxr:Cyrl kom:Cyrl krc:Cyrl lez:Cyrl
mhr:Cyrl mrj:Cyrl myv:Cyrl abk:Cyrl udm:Cyrl xal:Cyrl rue:Cyrl kbd:Cyrl ady:Cyrl chu:Cyrl
ara:Arab arz:Arab pes:Arab fas:Arab urd:Arab pus:Arab ckb:Arab snd:Arab uig:Arab azb:Arab mzn:Arab
lrc:Arab pnb:Arab kas:Arab glk:Arab ary:Arab apc:Arab acm:Arab prs:Arab
heb:Hebr yid:Hebr hin:Deva mar:Deva nep:Deva san:Deva mai:Deva new:Deva bih:Deva dty:Deva gom:Deva
bho:Deva awa:Deva mag:Deva ben:Beng asm:Beng bpy:Beng pan:Guru guj:Gujr ori:Orya tam:Taml tel:Telu
kan:Knda mal:Mlym sin:Sinh tha:Thai lao:Laoo khm:Khmr mya:Mymr kat:Geor xmf:Geor hye:Armn amh:Ethi
tir:Ethi bod:Tibt dzo:Tibt div:Thaa ell:Grek cmn:Hani zho:Hani wuu:Hani yue:Hani lzh:Hani gan:Hani
hak:Hani jpn:Jpan kor:Hang iii:Yiii iku:Cans sat:Olck
"""


def _table(text: str) -> dict[str, str]:
    return dict(tuple(pair.split(":", 1)) for pair in text.split())  # type: ignore[misc]


ISO1_TO_3 = _table(_ISO1)
SCRIPTS = _table(_SCRIPTS)

_FORM = re.compile(r"^[a-z]{2,3}_[A-Z][a-z]{3}$")


def normalize(label: str) -> str:
    """``lang_Script`` for a detector's label (``__label__`` prefix and case tolerated)."""
    code = label.rsplit("__label__", 1)[-1].strip()
    if code in WIKI_TO_3:
        code = WIKI_TO_3[code]
    lang, _, script = code.partition("_")
    lang = lang.lower()
    lang = ISO1_TO_3.get(lang, lang)
    if script and len(script) == 4 and script.isalpha():
        return f"{lang}_{script.capitalize()}"
    return f"{lang}_{SCRIPTS.get(lang, 'Zyyy' if lang == 'und' else 'Latn')}"


def is_language(label: str) -> bool:
    """Whether a detector's label normalises to a language: ISO 639-3 plus script, not ``und``
    (``__label__en``, ``eng_Latn``, ``__label__srp_Cyrl`` are; ``__label__hq``, ``__label__good``
    are not)."""
    code = normalize(label)  # a two-letter code it does not know stays two letters: no language
    return bool(re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", code)) and not code.startswith("und_")


def normalize_cld2(code: str) -> str:
    """``lang_Script`` for a CLD2 language code (``en``, ``zh-Hant``, ``xx-Bugi``)."""
    return normalize(CLD2_CODES.get(code, code))


def matches(lang: str, wanted: str) -> bool:
    """Whether a normalised ``lang`` is ``wanted``: ``eng`` matches any script, ``eng_Latn`` one."""
    return lang == wanted if "_" in wanted else lang.partition("_")[0] == wanted


def check(code: str, where: str) -> str:
    """A keep-list or settings code: ISO 639-3 (``eng``) or with a script (``eng_Latn``)."""
    if re.fullmatch(r"[a-z]{3}", code) or _FORM.match(code):
        return code
    raise ValueError(f"{where}: {code!r} is not an ISO 639-3 code (eng) or code_Script (eng_Latn)")
