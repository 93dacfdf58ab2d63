"""Masking benchmark: how well, and how fast, does the proxy toolset's masker find personal data
and secrets — beside Microsoft Presidio's pattern recognizers.

What it measures
----------------
1. **A labelled set, built from templates** (``--seed`` 42): ``--per-kind`` (27) sentences for
   each of the 13 kinds of :data:`ldims.proxy.masking.MASK_KINDS`, in English, Russian and
   Chinese in turn, each value freshly generated and valid (Luhn, ISO 13616, INN, SNILS and RIC
   check digits computed; phone numbers accepted by :mod:`phonenumbers` for their region;
   JWTs of real JSON), in many written forms (grouped, compact, with and without a key word);
   and ``--per-negative`` (12) sentences of each of 25 kinds of hard negatives: dates, versions,
   IP addresses, valid ISBNs, order and invoice numbers, prices, pages, hashes, UUIDs,
   measurement tables, Chinese dates and counts, numbers of the right shape whose check digit is
   wrong (beside the key word: "ИНН", "card", "IBAN"…), words like "sk-learn" or
   "max_tokens: 512". The gold spans are where the generated values were put (for ``password``
   and ``token``: the value only).

2. **Precision, recall and F1 per kind and overall** (micro over the kinds) of
   :func:`ldims.proxy.masking.find_spans` (the spans one pass of ``mask`` replaces). A found span
   counts when a gold span of the same kind overlaps it (each gold span once); any other found
   span is a false positive, also one in a negative sentence.

3. **Presidio, same sentences, same rule:** ``presidio-analyzer``'s predefined pattern
   recognizers for the kinds it has — ``EmailRecognizer``, ``PhoneRecognizer`` (regions RU, CN,
   US, GB, DE; it runs phonenumbers' ``PhoneNumberMatcher``), ``CreditCardRecognizer``,
   ``IbanRecognizer`` — each called with ``analyze(text, entities, nlp_artifacts=None)``: the
   ``AnalyzerEngine`` wants a spaCy model, which cannot be downloaded here, and without one
   only the context boost of the scores is lost. Every result counts (the engine's default
   score threshold is 0). Presidio has nothing for the other nine kinds; its overall row over
   all kinds counts their values as missed, a second row keeps to its four kinds. Skipped, with
   the reason printed, when ``presidio_analyzer`` is not importable (it is not a dependency of
   LDIMS: ``pip install presidio-analyzer`` into the venv).

4. **The floor the checks leave:** of ``--floor`` (2000) uniformly random numbers of each
   checked shape (a card prefix and length, a 12-digit INN, a formatted SNILS, a RIC with a
   valid date, a 10-digit INN beside "ИНН", a German IBAN, a US and a Chinese mobile phone
   layout), the share masked: what no check digit or numbering plan can tell from a real
   value.

5. **Throughput on real text** read in place from ``../shared/corpus``: the Russian, Chinese
   and English paragraphs of XQuAD (``ir/xquad-*/corpus.jsonl``), the Cranfield abstracts,
   War and Peace, the UDHR's first article in many languages and a Markdown page, each cut at
   line ends into pieces of about ``--chunk`` (10,000) characters, as the proxy masks one text
   at a time. MB/s = UTF-8 megabytes (10^6) over the best of ``--repeat`` (3) passes of
   ``mask`` over the pieces; Presidio runs its four recognizers over the same pieces, once.
   What each finds there is listed: in this text, every find is a false positive or a public
   number.

How to run (from the project root)::

    .venv/bin/python bench/masking.py
    .venv/bin/python bench/masking.py --per-kind 50 --per-negative 20 --repeat 5

The Markdown tables are printed and written to ``bench/results/masking.md`` (overwritten).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import random
import string
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import phonenumbers
from report import DASH, machine_line, markdown_table, publish
from stdnum import ean, iban, isbn, luhn
from stdnum.cn import ric
from stdnum.ru import inn

from ldims.proxy.masking import MASK_KINDS, find_spans, mask

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = Path(__file__).resolve().parent / "results" / "masking.md"
Finder = Callable[[str], list[tuple[int, int, str]]]

# Presidio's entity → our kind, for the recognizers it has.
PRESIDIO_KINDS = {
    "EMAIL_ADDRESS": "email",
    "PHONE_NUMBER": "phone",
    "CREDIT_CARD": "card",
    "IBAN_CODE": "iban",
}
REAL_TEXTS = [
    ("XQuAD ru (Wikipedia)", "ir/xquad-ru/corpus.jsonl"),
    ("XQuAD zh (Wikipedia)", "ir/xquad-zh/corpus.jsonl"),
    ("XQuAD en (Wikipedia)", "ir/xquad-en/corpus.jsonl"),
    ("Cranfield abstracts (en)", "ir/cranfield/corpus.jsonl"),
    ("War and Peace (en, .txt)", "docs/unstructured__book-war-and-peace-1225p.txt"),
    ("UDHR art. 1, many languages (.txt)", "docs/unstructured__UDHR_first_article_all.txt"),
    ("docling wiki page (.md)", "docs/docling__wiki.md"),
]


# --- the labelled set -----------------------------------------------------------------------------

LANGUAGES = ("en", "ru", "zh")
BASE62 = string.ascii_letters + string.digits
URLSAFE = BASE62 + "_-"


@dataclass(frozen=True)
class Case:
    text: str
    gold: tuple[tuple[int, int, str], ...]  # (start, end, kind)
    language: str
    group: str  # the kind, or the kind of look-alike


def digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choices(string.digits, k=count))


def chars(rng: random.Random, pool: str, count: int) -> str:
    return "".join(rng.choices(pool, k=count))


def fill(rng: random.Random, pattern: str) -> str:
    """``#`` → a digit."""
    return "".join(rng.choice(string.digits) if c == "#" else c for c in pattern)


def make_email(rng: random.Random) -> str:
    user = rng.choice(
        ["anna.smith", "ivan.petrov", "zhang.wei", "li_na", "j.doe+billing", "o.sidorova",
         "wang.fang88", "m.kuznetsov", "hr-team", "chen.jing", "d.volkov1990", "support"]
    )  # fmt: skip
    domain = rng.choice(
        ["example.com", "mail.ru", "yandex.ru", "qq.com", "163.com", "acme-corp.co.uk",
         "corp.example.cn", "gmail.com", "пример.рф", "uni-heidelberg.de", "sub.mail.example.org"]
    )  # fmt: skip
    return f"{user}{rng.choice(['', str(rng.randint(1, 99))])}@{domain}"


PHONE_FORMATS = [
    ("RU", "+7 (9##) ###-##-##"), ("RU", "+7 9## ### ## ##"), ("RU", "8 (495) ###-##-##"),
    ("RU", "8 800 ###-##-##"), ("RU", "8-9##-###-##-##"), ("RU", "+79#########"),
    ("RU", "8 (812) ###-##-##"), ("RU", "8(495)###-##-##"), ("RU", "+7-9##-###-##-##"),
    ("RU", "8 (8512) ##-##-##"), ("RU", "+7 495 #######"), ("CN", "13# #### ####"),
    ("CN", "+86 13#-####-####"), ("CN", "+86 18#########"), ("CN", "010-########"),
    ("CN", "021-########"), ("CN", "0755-########"), ("CN", "15#########"),
    ("CN", "+86 10 #### ####"), ("CN", "(010) ####-####"), ("CN", "021-#### ####"),
    ("CN", "400-###-####"), ("CN", "186-####-####"), ("US", "(212) ###-####"),
    ("US", "212-###-####"), ("US", "+1 415 ### ####"), ("US", "1-800-###-####"),
    ("US", "646.###.####"), ("US", "+1-212-###-####"), ("GB", "+44 20 7946 0###"),
    ("GB", "020 7946 0###"), ("GB", "+44 7700 900###"), ("GB", "+44 (0)20 7946 0###"),
    ("DE", "+49 30 ########"), ("DE", "030 ########"), ("DE", "+49 (0)89 #######"),
    ("DE", "089/#######"), ("DE", "0049 30 ########"),
]  # fmt: skip


def make_phone(rng: random.Random) -> str:
    while True:
        region, pattern = rng.choice(PHONE_FORMATS)
        for _ in range(200):
            number = fill(rng, pattern)
            if phonenumbers.is_valid_number(phonenumbers.parse(number, region)):
                return number


CARD_BRANDS = [
    ("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("2200", 16), ("2204", 16),
    ("34", 15), ("37", 15), ("6011", 16), ("65", 16), ("62", 16), ("62", 19), ("35", 16),
]  # fmt: skip


def card_digits(rng: random.Random) -> str:
    prefix, length = rng.choice(CARD_BRANDS)
    body = prefix + digits(rng, length - len(prefix) - 1)
    return body + luhn.calc_check_digit(body)


def grouped(number: str, separator: str) -> str:
    if len(number) == 15:  # Amex: 4-6-5
        return separator.join([number[:4], number[4:10], number[10:]])
    return separator.join(number[i : i + 4] for i in range(0, len(number), 4))


def make_card(rng: random.Random) -> str:
    return grouped(card_digits(rng), rng.choice([" ", " ", "-", "", "\u00a0"]))


IBAN_BBANS = {
    "DE": "n18", "GB": "a4n14", "FR": "n10c11n2", "NL": "a4n10", "IT": "a1n10c12", "CH": "n5c12",
    "PL": "n24", "AT": "n16", "KZ": "n3c13", "SE": "n20", "NO": "n11", "FI": "n14", "CZ": "n20",
}  # fmt: skip
POOLS = {
    "a": string.ascii_uppercase,
    "n": string.digits,
    "c": string.ascii_uppercase + string.digits,
}


def make_iban(rng: random.Random) -> str:
    country, shape = rng.choice(sorted(IBAN_BBANS.items()))
    while True:
        bban = "".join(
            chars(rng, POOLS[shape[i]], int(shape[i + 1 : i + 3].rstrip("acn")))
            for i in range(len(shape))
            if shape[i] in POOLS
        )
        number = country + iban.calc_check_digits(country + "00" + bban) + bban
        if iban.is_valid(number):
            break
    if rng.random() < 0.3:
        return number
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4))


def make_inn(rng: random.Random) -> str:
    if rng.random() < 0.4:
        body = str(rng.randint(10**8, 10**9 - 1))
        return body + inn.calc_company_check_digit(body)
    body = str(rng.randint(10**9, 10**10 - 1))
    return body + inn.calc_personal_check_digits(body)


def snils_check(nine: str) -> str:
    total = sum(int(d) * w for d, w in zip(nine, range(9, 0, -1), strict=True))
    return f"{total % 101 % 100:02d}"


def make_snils(rng: random.Random) -> str:
    nine = str(rng.randint(1_002_000, 999_999_999)).zfill(9)
    check = snils_check(nine)
    layout = rng.choice(["{}-{}-{} {}", "{}-{}-{} {}", "{}-{}-{}-{}", "{} {} {} {}", "{}{}{}{}"])
    return layout.format(nine[:3], nine[3:6], nine[6:], check)


def make_passport(rng: random.Random) -> str:
    series = (
        f"{rng.randint(1, 99):02d}{rng.choice(['97', '99', '03', '08', '12', '15', '19', '23'])}"
    )
    number = str(rng.randint(100000, 999999))
    layout = rng.choice(["{} {} {}", "{}{} {}", "{} {} № {}", "{}{} № {}", "{} {} номер {}"])
    return layout.format(series[:2], series[2:], number)


RIC_REGIONS = ["110101", "110105", "310104", "310115", "440106", "440305", "320102", "330106",
               "510107", "420111", "500103", "610113"]  # fmt: skip


def make_ric(rng: random.Random) -> str:
    body = f"{rng.choice(RIC_REGIONS)}{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}"
    body += f"{rng.randint(1, 28):02d}{rng.randint(0, 999):03d}"
    number = body + ric.calc_check_digit(body + "0")
    if rng.random() < 0.15:
        return f"{number[:6]} {number[6:14]} {number[14:]}"
    return number.lower() if rng.random() < 0.1 else number


def make_api_key(rng: random.Random) -> str:
    return rng.choice(
        [
            lambda: "sk-proj-" + chars(rng, URLSAFE, 48),
            lambda: "sk-ant-api03-" + chars(rng, URLSAFE, 93) + "AA",
            lambda: "sk-" + chars(rng, BASE62, 48),
            lambda: "ghp_" + chars(rng, BASE62, 36),
            lambda: "github_pat_" + chars(rng, BASE62, 22) + "_" + chars(rng, BASE62, 59),
            lambda: f"xoxb-{digits(rng, 12)}-{digits(rng, 13)}-{chars(rng, BASE62, 24)}",
            lambda: "AKIA" + chars(rng, string.ascii_uppercase + string.digits, 16),
            lambda: "AIza" + chars(rng, URLSAFE, 35),
            lambda: "glpat-" + chars(rng, URLSAFE, 20),
            lambda: "sk_live_" + chars(rng, BASE62, 24),
            lambda: "npm_" + chars(rng, BASE62, 36),
            lambda: "hf_" + chars(rng, BASE62, 34),
        ]
    )()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(rng: random.Random) -> str:
    alg = rng.choice(["HS256", "RS256", "ES256"])
    header = {"alg": alg, "typ": "JWT"}
    payload: dict[str, object] = {"sub": str(rng.randint(1, 10**6))}
    payload["iat"] = rng.randint(1_600_000_000, 1_800_000_000)
    if rng.random() < 0.5:
        payload["name"] = rng.choice(["Anna Smith", "Иван Петров", "张伟"])
    signature = chars(rng, URLSAFE, {"HS256": 43, "RS256": 342, "ES256": 86}[alg])
    return (
        f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}.{signature}"
    )


def make_bearer(rng: random.Random) -> str:
    return rng.choice(
        [
            lambda: chars(rng, "0123456789abcdef", rng.choice([32, 40])),
            lambda: chars(rng, URLSAFE, rng.randint(30, 60)),
            lambda: "ya29.a0" + chars(rng, URLSAFE, 60),
        ]
    )()


def make_basic(rng: random.Random) -> str:
    user = rng.choice(["admin", "api", "ivan", "deploy", "zhangwei"])
    return base64.b64encode(f"{user}:{make_password(rng, url=True)}".encode()).decode()


def make_password(rng: random.Random, url: bool = False) -> str:
    symbols = "!#%^*_+=-" if url else "!@#%^*_+=-?"
    return rng.choice(
        [
            lambda: (
                rng.choice(["Summer", "Qwerty", "Moscow", "Dragon", "Beijing", "Welcome"])
                + str(rng.randint(1, 2025))
                + rng.choice(symbols)
            ),
            lambda: chars(rng, BASE62, 1) + chars(rng, BASE62 + symbols, rng.randint(9, 15)) + "1",
            lambda: chars(rng, "0123456789abcdef", 32),
        ]
    )()


def make_private_key(rng: random.Random) -> str:
    label = rng.choice(["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY",
                        "ENCRYPTED PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])  # fmt: skip
    lines = [chars(rng, BASE62 + "+/", 64) for _ in range(rng.randint(3, 20))]
    lines.append(chars(rng, BASE62 + "+/", rng.randint(8, 60)) + "==")
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


# Each kind: how its values are made, and sentences around them ({} is the value).
KINDS: dict[str, tuple[Callable[[random.Random], str], dict[str, list[str]]]] = {
    "email": (make_email, {
        "en": ["Please send the signed contract to {} by Friday.", "Contact: {}",
               "Forwarded from {} on Monday."],
        "ru": ["По вопросам пишите на {}, ответим за день.", "Эл. почта: {}.",
               "Резюме отправляйте на адрес {} с пометкой «вакансия»."],
        "zh": ["如有疑问，请发送邮件至{}联系我们。", "邮箱：{}", "简历请投递到 {}，注明应聘职位。"],
    }),
    "phone": (make_phone, {
        "en": ["Call me at {} after 6 pm.", "Our office: {}.", "For support dial {} (24/7).",
               "You can reach Dr. Smith on {}."],
        "ru": ["Звоните по телефону {} с 9 до 18.", "Мой номер {}, пишите в Telegram.",
               "Контакты отдела продаж: {}.", "Приёмная: {}"],
        "zh": ["如有问题请拨打{}。", "联系电话：{}", "我的手机号是{}，随时联系。", "客服热线 {}"],
    }),
    "card": (make_card, {
        "en": ["Please charge my card {} for the order.", "Card number: {} (exp 11/27)",
               "Paid with {} yesterday."],
        "ru": ["Номер карты: {}, срок действия 09/26.", "Оплата картой {} прошла успешно."],
        "zh": ["银行卡号{}已绑定。", "请向卡号 {} 转账。"],
    }),
    "iban": (make_iban, {
        "en": ["Wire the funds to IBAN {} by Friday.", "Account: {} (SWIFT COBADEFFXXX)"],
        "ru": ["Реквизиты: IBAN {}, получатель ООО «Ромашка».", "Счёт получателя {}"],
        "zh": ["收款账户IBAN：{}。", "请汇款至 {}，备注合同号。"],
    }),
    "ru_inn": (make_inn, {
        "en": ["The supplier's taxpayer number (INN) is {}.", "INN: {}"],
        "ru": ["ООО «Вектор», ИНН {}, КПП 773601001.", "ИП Иванов И. И. (ИНН {})",
               "ИНН/КПП {}/771001001"],
        "zh": ["俄罗斯供应商纳税人识别号：{}", "俄方公司税号（INN）{}"],
    }),
    "ru_snils": (make_snils, {
        "en": ["Employee SNILS: {}.", "SNILS {} (pension insurance)"],
        "ru": ["СНИЛС {}, полис ОМС выдан в 2019 году.", "Страховой номер: {}"],
        "zh": ["俄罗斯养老保险号（SNILS）{}", "SNILS：{}"],
    }),
    "ru_passport": (make_passport, {
        "en": ["Russian passport {} issued in Moscow.", "Passport (RU): {}"],
        "ru": ["Паспорт гражданина РФ: серия {}, выдан ОВД «Тверской».",
               "паспорт {} выдан 12.03.2015", "Данные паспорта: {}"],
        "zh": ["俄罗斯护照号码 {}", "护照：{}"],
    }),
    "cn_resident_id": (make_ric, {
        "en": ["Chinese ID card number {} was verified.", "Resident ID: {}"],
        "ru": ["Удостоверение личности КНР: {}", "номер ID-карты гражданина КНР {}"],
        "zh": ["身份证号码：{}，住址北京市朝阳区。", "公民身份号码 {} 已核验。",
               "请核对身份证号{}是否正确。"],
    }),
    "api_key": (make_api_key, {
        "en": ["export OPENAI_API_KEY={}", "The key {} was leaked in the last commit.",
               "Rotate {} today."],
        "ru": ["Ключ API: {}, не публикуйте его.", "В конфиге лежит токен {}"],
        "zh": ["API 密钥：{}", "请立即吊销泄露的密钥 {}。"],
    }),
    "jwt": (make_jwt, {
        "en": ["The id_token returned was {} and it expires in an hour.",
               "Authorization: Bearer {}", "Paste {} into jwt.io to inspect it."],
        "ru": ["Токен сессии: {}", "В заголовке передаётся {}"],
        "zh": ["访问令牌：{}。", "登录后返回的 JWT 为 {}"],
    }),
    "password": (make_password, {
        "en": ["password={}", "DB_PASSWORD={}", 'login with {"user": "admin", "password": "{}"}',
               "  password: '{}'", "client_secret: {}", "The root password: {}"],
        "ru": ["Логин: admin, пароль: {}", "Пароль: {}", "Пароль — {}"],
        "zh": ["数据库密码：{}，请妥善保管。", "初始密码为{}", "WiFi密码是{}", "密码：{}"],
    }),
    "private_key": (make_private_key, {
        "en": ["Deploy key:\n{}\nKeep it safe.", "{}"],
        "ru": ["Закрытый ключ сервера:\n{}\nНикому не передавайте."],
        "zh": ["私钥如下：\n{}\n请勿泄露。"],
    }),
}  # fmt: skip
TOKEN_TEMPLATES = {
    "en": ["Authorization: {scheme} {}", "curl -H 'Authorization: {scheme} {}' https://api.x.io"],
    "ru": ["Заголовок Authorization: {scheme} {} передаётся всегда."],
    "zh": ["请求头：Authorization: {scheme} {}"],
}


def case(template: str, value: str, kind: str, language: str) -> Case:
    before, after = template.split("{}")
    gold = ((len(before), len(before) + len(value), kind),)
    return Case(before + value + after, gold, language, kind)


def positives(seed: int, per_kind: int) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for i in range(per_kind):
        language = LANGUAGES[i % 3]
        for kind, (make, templates) in KINDS.items():
            cases.append(case(rng.choice(templates[language]), make(rng), kind, language))
        # the credentials after the scheme of an Authorization header
        basic = rng.random() < 0.3
        value = make_basic(rng) if basic else make_bearer(rng)
        template = rng.choice(TOKEN_TEMPLATES[language])
        template = template.replace("{scheme}", "Basic" if basic else "Bearer")
        cases.append(case(template, value, "token", language))
        if i % 5 == 0:  # the password of a URL's user info
            url = "DATABASE_URL=postgresql://app:{}@db.internal:5432/app"
            cases.append(case(url, make_password(rng, url=True), "password", language))
    return cases


def isbn13(rng: random.Random) -> str:
    body = "978" + rng.choice(["5", "0", "3", "7"]) + digits(rng, 8)
    return body + ean.calc_check_digit(body)


def luhn_fail(rng: random.Random) -> str:
    while True:
        number = card_digits(rng)
        number = number[:-1] + digits(rng, 1)
        if not luhn.is_valid(number):
            return grouped(number, " ")


def inn_fail(rng: random.Random) -> str:
    while True:
        number = digits(rng, rng.choice([10, 12]))
        if not inn.is_valid(number) and not number.startswith("00"):
            return number


def snils_fail(rng: random.Random) -> str:
    nine = str(rng.randint(1_002_000, 999_999_999)).zfill(9)
    check = f"{(int(snils_check(nine)) + rng.randint(1, 99)) % 100:02d}"
    return f"{nine[:3]}-{nine[3:6]}-{nine[6:]} {check}"


def ric_fail(rng: random.Random) -> str:
    number = make_ric(rng).replace(" ", "").upper()
    wrong = [c for c in "0123456789X" if c != number[-1]]
    return number[:-1] + rng.choice(wrong)


def iban_fail(rng: random.Random) -> str:
    number = make_iban(rng).replace(" ", "")
    return number[:2] + f"{(int(number[2:4]) + rng.randint(1, 90)) % 97 + 2:02d}" + number[4:]


def ip(rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def day(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(2000, 2029), rng.randint(1, 12), rng.randint(1, 28)


def dates(r: random.Random) -> list[str]:
    (y, m, d), hour = day(r), r.randint(0, 23)
    return [
        f"The report was filed on {y}-{m:02d}-{d:02d} at {hour:02d}:{r.randint(0, 59):02d}.",
        f"Встреча назначена на {d:02d}.{m:02d}.{y} в 10:30.",
        f"Due {m:02d}/{d:02d}/{y}; logged {y}-{m:02d}-{d:02d}T09:52:25Z.",
    ]


def chinese_counts(r: random.Random) -> list[str]:
    y, m, d = day(r)
    return [
        f"{y}年{m}月{d}日，公司营收增长了{r.randint(1, 99)}.{r.randint(0, 9)}%，"
        f"共有{r.randint(1000000, 99999999)}名用户，员工编号{r.randint(10000, 999999)}。"
    ]


def versions(r: random.Random) -> list[str]:
    version = ".".join(str(r.randint(0, 20)) for _ in range(3)) + f".{r.randint(0, 9999)}"
    build = f"v10.0.{r.randint(10000, 22631)}.{r.randint(1000, 4000)}"
    return [f"Update to version {version} (Windows {build})."]


def ips(r: random.Random) -> list[str]:
    return [f"Host {ip(r)} forwards to {ip(r)}:{r.randint(1024, 65535)}; mask 255.255.255.0."]


def isbns(r: random.Random) -> list[str]:
    number = isbn13(r)
    return [f"ISBN {isbn.format(number)}", f"ISBN {number}", f"ISBN {isbn.to_isbn10(number)}"]


def orders(r: random.Random) -> list[str]:
    return [
        f"Order #{digits(r, r.choice([8, 10, 11, 12]))} shipped.",
        f"Заказ № {digits(r, r.choice([10, 11, 12]))} оформлен {r.randint(1, 28)} мая.",
        f"订单号：{digits(r, 14)}，发票号 {digits(r, 10)}。",
        f"Invoice INV-{r.randint(2015, 2029)}-{digits(r, 6)} is paid.",
    ]


def pages(r: random.Random) -> list[str]:
    a, b = r.randint(1, 500), r.randint(501, 999)
    return [f"See pp. {a}–{b}; стр. {a % 99}-{b}; 第{a % 99}页."]


def prices(r: random.Random) -> list[str]:
    def three() -> int:
        return r.randint(100, 999)

    return [
        f"Цена: {r.randint(1, 999)} {three()} {three()},{r.randint(10, 99)} ₽",
        f"Price ${r.randint(1, 999)},{three()},{three()}.{r.randint(10, 99)}",
        f"价格：¥{r.randint(1, 99)},{three()}.00，合计{r.randint(1000, 9999)}万元",
    ]


def bad_cards(r: random.Random) -> list[str]:
    return [
        f"Card number {luhn_fail(r)} was declined.",
        f"Номер карты указан с ошибкой: {luhn_fail(r)}",
        f"卡号 {luhn_fail(r)} 无效",
    ]


def bad_inns(r: random.Random) -> list[str]:
    return [f"ИНН {inn_fail(r)}", f"INN: {inn_fail(r)}", f"税号 {inn_fail(r)}"]


def bad_snilses(r: random.Random) -> list[str]:
    return [f"СНИЛС {snils_fail(r)}", f"SNILS: {snils_fail(r)}"]


def bad_rics(r: random.Random) -> list[str]:
    return [f"身份证号码 {ric_fail(r)} 校验失败。", f"ID {ric_fail(r)} is invalid"]


def bad_ibans(r: random.Random) -> list[str]:
    return [f"IBAN {iban_fail(r)} was rejected."]


def random_numbers(r: random.Random) -> list[str]:
    return [
        f"Reference {digits(r, 10)}",
        f"Tracking {digits(r, 12)}",
        f"Batch {digits(r, 16)}",
        f"Артикул {digits(r, 10)}",
        f"编号 {digits(r, 12)}",
    ]


def hashes(r: random.Random) -> list[str]:
    hexits = "0123456789abcdef"
    return [
        f"sha256: {chars(r, hexits, 64)}",
        f"commit {chars(r, hexits, 40)}",
        f"MD5 {chars(r, hexits, 32)} matches.",
    ]


def uuids(r: random.Random) -> list[str]:
    return [f"Request id {uuid.UUID(int=r.getrandbits(128), version=4)} failed."]


def tables(r: random.Random) -> list[str]:
    rows = ["| sample | length, mm | width, mm | mass, g | reading |", "|---|---|---|---|---|"]
    for n in range(3):
        values = [str(r.randint(100, 9999)) for _ in range(4)]
        rows.append(f"| A-{n + 1} | " + " | ".join(values) + " |")
    return ["\n".join(rows)]


def series(r: random.Random) -> list[str]:
    def mm() -> int:
        return r.randint(700, 790)

    return [
        "Readings (Hz): " + " ".join(str(r.randint(100, 9999)) for _ in range(6)),
        f"Давление: {mm()} {mm()} {mm()} мм рт. ст.",
        f"Population {r.randint(100, 999)} {r.randint(100, 999)} {r.randint(100, 999)}.",
    ]


def coordinates(r: random.Random) -> list[str]:
    latitude, longitude = r.uniform(-90, 90), r.uniform(-180, 180)
    return [f"Coordinates {latitude:.4f}, {longitude:.4f}; altitude {r.randint(0, 4000)} m."]


def timestamps(r: random.Random) -> list[str]:
    return [f"Unix time {r.randint(10**9, 2 * 10**9)}", f"ts={r.randint(10**12, 2 * 10**12)}"]


def placeholders(r: random.Random) -> list[str]:
    serial = chars(r, string.ascii_uppercase + string.digits, 12)
    return [
        "Телефон: +7 (000) 000-00-00",
        "Phone: (555) 000-0000",
        "电话：000-00000000",
        f"Phone model iPhone {r.randint(8, 16)}, serial {serial}",
    ]


def passport_words(r: random.Random) -> list[str]:
    y, m, d = day(r)
    return [
        f"Паспорт выдан {d:02d}.{m:02d}.{y} ОВД района.",
        f"Passport photo {r.randint(30, 40)}x{r.randint(40, 50)} mm, fee {r.randint(1000, 9999)}.",
        f"серия романов {y} года, том {r.randint(1, 30)}",
    ]


def email_words(r: random.Random) -> list[str]:
    return [
        f"The retina logo is icon@{r.randint(2, 3)}x.png.",
        f"npm install lodash@4.17.{r.randint(1, 21)}",
        f"Ping @user{r.randint(1, 999)} in the channel.",
    ]


def key_words(r: random.Random) -> list[str]:
    return [
        "We use sk-learn and the task-management-system-overview.",
        "AKIA is a prefix, not a key.",
        "Bearer tokens are described in RFC 6750.",
        "The basic configuration is below.",
    ]


def password_words(r: random.Random) -> list[str]:
    return [
        f"max_tokens: {r.randint(64, 4096)}\ntoken_type: bearer\ntokenizer: bert-base-uncased",
        f"password_min_length: {r.randint(6, 16)}",
        "Password: ********",
        "password: ${DB_PASSWORD}",
        "secret = <your secret here>",
        "To change your password: open Settings and tap Security.",
        "Reset your password via the link.",
        "Сброс пароля по ссылке. 忘记密码？点击这里。",
    ]


# Each kind of look-alike: sentences to choose from (made afresh for every sentence).
NEGATIVE_MAKERS: dict[str, Callable[[random.Random], list[str]]] = {
    "dates and times": dates,
    "Chinese dates and counts": chinese_counts,
    "version numbers": versions,
    "IP addresses": ips,
    "ISBNs (valid)": isbns,
    "order and invoice numbers": orders,
    "page ranges": pages,
    "prices": prices,
    "card numbers failing Luhn": bad_cards,
    "INN failing the check": bad_inns,
    "SNILS failing the check": bad_snilses,
    "RIC failing the check": bad_rics,
    "IBAN failing the check": bad_ibans,
    "random 10/12/16-digit numbers": random_numbers,
    "hex hashes": hashes,
    "UUIDs": uuids,
    "measurement tables": tables,
    "measurement series": series,
    "coordinates": coordinates,
    "timestamps": timestamps,
    "phone-like placeholders": placeholders,
    "passport-like words": passport_words,
    "e-mail look-alikes": email_words,
    "key-like words": key_words,
    "password-like words": password_words,
}


def negatives(seed: int, per_group: int) -> list[Case]:
    rng = random.Random(seed + 1)
    cases = []
    for group, make in NEGATIVE_MAKERS.items():
        for i in range(per_group):
            cases.append(Case(rng.choice(make(rng)), (), LANGUAGES[i % 3], group))
    return cases


def floor_cases(seed: int, count: int) -> list[tuple[str, list[str]]]:
    """Uniformly random numbers of each checked shape, in a sentence without a key word."""
    rng = random.Random(seed + 2)

    def card_shape() -> str:
        prefix, length = rng.choice([("4", 16), ("51", 16), ("2200", 16), ("62", 16)])
        return "Reference " + grouped(prefix + digits(rng, length - len(prefix)), " ")

    def ric_shape() -> str:
        body = f"{rng.choice(RIC_REGIONS)}{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}"
        return f"编号 {body}{rng.randint(1, 28):02d}{digits(rng, 3)}{rng.choice('0123456789X')}"

    shapes: list[tuple[str, Callable[[], str]]] = [
        ("16 digits with a card prefix, any last digit", card_shape),
        ("12 digits (a personal INN's shape), no key word", lambda: "Ref. " + digits(rng, 12)),
        ("10 digits right after «ИНН»", lambda: "ИНН " + str(rng.randint(10**9, 10**10 - 1))),
        (
            "###-###-### ## (SNILS layout), no key word",
            lambda: "Код " + fill(rng, "###-###-### ##"),
        ),
        ("18 chars: RIC region + valid date + any check", ric_shape),
        ("DE + 20 digits (IBAN shape)", lambda: "Konto DE" + digits(rng, 20)),
        ("(###) ###-#### (US layout), any digits", lambda: "Ref. " + fill(rng, "(###) ###-####")),
        (
            "1[3-9] + 9 digits (Chinese mobile shape)",
            lambda: f"Ref. 1{rng.randint(3, 9)}{digits(rng, 9)}",
        ),
    ]
    return [(label, [make() for _ in range(count)]) for label, make in shapes]


# --- the finders ----------------------------------------------------------------------------------


def ldims_finder(text: str) -> list[tuple[int, int, str]]:
    return [(span.start, span.end, span.kind) for span in find_spans(text)]


def presidio_finder() -> tuple[Finder | None, str]:
    """Presidio's four recognizers as a finder, or None and why not."""
    try:
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            EmailRecognizer,
            IbanRecognizer,
            PhoneRecognizer,
        )
    except ImportError as error:
        return None, f"presidio_analyzer is not importable ({error})"
    # tldextract (behind the e-mail recognizer) tries to fetch the public suffix list once,
    # fails offline and logs a traceback before using its bundled copy.
    logging.getLogger("tldextract").setLevel(logging.CRITICAL)
    recognizers = [
        EmailRecognizer(),
        PhoneRecognizer(supported_regions=("RU", "CN", "US", "GB", "DE")),
        CreditCardRecognizer(),
        IbanRecognizer(),
    ]

    def find(text: str) -> list[tuple[int, int, str]]:
        found = set()
        for recognizer in recognizers:
            for result in recognizer.analyze(text, recognizer.supported_entities, None):
                found.add((result.start, result.end, PRESIDIO_KINDS[result.entity_type]))
        return sorted(found)

    return find, f"presidio-analyzer {metadata.version('presidio-analyzer')}"


# --- quality --------------------------------------------------------------------------------------


@dataclass
class Score:
    tp: Counter[str] = field(default_factory=Counter)
    fp: Counter[str] = field(default_factory=Counter)
    fn: Counter[str] = field(default_factory=Counter)
    fp_by_group: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def prf(self, kinds: Sequence[str]) -> tuple[float | None, float | None, float | None]:
        tp = sum(self.tp[k] for k in kinds)
        fp = sum(self.fp[k] for k in kinds)
        fn = sum(self.fn[k] for k in kinds)
        precision = tp / (tp + fp) if tp + fp else None
        recall = tp / (tp + fn) if tp + fn else None
        f1 = (
            2 * precision * recall / (precision + recall)
            if precision is not None and recall is not None and precision + recall
            else None
        )
        return precision, recall, f1


def evaluate(cases: list[Case], finder: Finder) -> Score:
    score = Score()
    started = time.perf_counter()
    found_per_case = [finder(case.text) for case in cases]
    score.seconds = time.perf_counter() - started
    for case, found in zip(cases, found_per_case, strict=True):
        unmatched = list(case.gold)
        for start, end, kind in found:
            hit = next((g for g in unmatched if g[2] == kind and g[0] < end and start < g[1]), None)
            if hit:
                unmatched.remove(hit)
                score.tp[kind] += 1
                continue
            score.fp[kind] += 1
            score.fp_by_group[case.group] += 1
            score.examples.setdefault(case.group, []).append(f"{kind}: {case.text[start:end]}")
        for _, _, kind in unmatched:
            score.fn[kind] += 1
            score.examples.setdefault("missed " + kind, []).append(case.text)
    return score


def pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def quality_rows(ours: Score, presidio: Score | None, gold: Counter[str]) -> list[list[str]]:
    rows = []
    covered = set(PRESIDIO_KINDS.values())
    for kind in MASK_KINDS:
        row = [f"`{kind}`", str(gold[kind]), *(pct(v) for v in ours.prf([kind]))]
        if presidio is None:
            row += [DASH] * 3
        elif kind in covered:
            row += [pct(v) for v in presidio.prf([kind])]
        else:
            row += ["not covered"] + [DASH] * 2
        rows.append(row)
    totals = [("**all 13 kinds (micro)**", list(MASK_KINDS))]
    totals.append(("**Presidio's 4 kinds (micro)**", [k for k in MASK_KINDS if k in covered]))
    for label, kinds in totals:
        row = [label, str(sum(gold[k] for k in kinds)), *(f"**{pct(v)}**" for v in ours.prf(kinds))]
        row += [DASH] * 3 if presidio is None else [f"**{pct(v)}**" for v in presidio.prf(kinds)]
        rows.append(row)
    return rows


def negative_rows(cases: list[Case], ours: Score, presidio: Score | None) -> list[list[str]]:
    samples = Counter(case.group for case in cases if not case.gold)
    rows = []
    for group, count in samples.items():
        theirs = DASH if presidio is None else str(presidio.fp_by_group[group])
        rows.append([group, str(count), str(ours.fp_by_group[group]), theirs])
    return rows


def floor_rows(seed: int, count: int) -> list[list[str]]:
    rows = []
    for label, texts in floor_cases(seed, count):
        masked = sum(1 for text in texts if find_spans(text))
        rows.append([label, str(len(texts)), f"{masked / len(texts):.1%}"])
    return rows


# --- throughput -----------------------------------------------------------------------------------


def real_text(path: Path) -> str:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as lines:
            return "\n\n".join(json.loads(line)["text"] for line in lines if line.strip())
    return path.read_text(encoding="utf-8", errors="replace")


def chunks(text: str, size: int) -> list[str]:
    """``text`` cut at line ends into pieces of about ``size`` characters."""
    pieces, start = [], 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        pieces.append(text[start:end])
        start = end
    return pieces


@dataclass
class Throughput:
    name: str
    megabytes: float
    pieces: int
    seconds: float
    found: Counter[str]
    presidio_seconds: float | None = None
    presidio_found: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)


def throughput(
    name: str, path: Path, args: argparse.Namespace, presidio: Finder | None
) -> Throughput:
    pieces = chunks(real_text(path), args.chunk)
    megabytes = sum(len(piece.encode("utf-8")) for piece in pieces) / 1e6
    best, found = float("inf"), Counter[str]()
    for _ in range(args.repeat):
        started = time.perf_counter()
        results = [mask(piece) for piece in pieces]
        best = min(best, time.perf_counter() - started)
    for result in results:
        found.update(result.counts)
    run = Throughput(name, megabytes, len(pieces), best, found)
    for piece in pieces:
        for span in find_spans(piece):
            if len(run.examples) < 4:
                run.examples.append(f"{span.kind}: `{piece[span.start : span.end]}`")
    if presidio is not None:
        started = time.perf_counter()
        for piece in pieces:
            run.presidio_found.update(kind for _, _, kind in presidio(piece))
        run.presidio_seconds = time.perf_counter() - started
    return run


def counts_text(counts: Counter[str]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none"


def throughput_rows(runs: list[Throughput]) -> list[list[str]]:
    rows = []
    for run in runs:
        theirs = [DASH, DASH]
        if run.presidio_seconds is not None:
            theirs = [
                f"{run.megabytes / run.presidio_seconds:.2f}",
                counts_text(run.presidio_found),
            ]
        rows.append(
            [
                run.name,
                f"{run.megabytes:.3f}",
                str(run.pieces),
                f"{run.megabytes / run.seconds:.1f}",
                f"{run.seconds / (run.megabytes * 1e6) * 1e4 * 1e3:.2f}",
                counts_text(run.found),
                *theirs,
            ]
        )
    return rows


# --- report ---------------------------------------------------------------------------------------


def command_line(args: argparse.Namespace) -> str:
    return (
        f".venv/bin/python bench/masking.py --seed {args.seed} --per-kind {args.per_kind} "
        f"--per-negative {args.per_negative} --floor {args.floor} --chunk {args.chunk} "
        f"--repeat {args.repeat}"
    )


def report(
    args: argparse.Namespace,
    cases: list[Case],
    ours: Score,
    presidio: Score | None,
    presidio_note: str,
    runs: list[Throughput],
) -> str:
    gold = Counter(kind for case in cases for _, _, kind in case.gold)
    negatives = sum(1 for case in cases if not case.gold)
    languages = Counter(case.language for case in cases)
    quality_header = ["kind", "gold", "LDIMS P", "LDIMS R", "LDIMS F1"]
    quality_header += ["Presidio P", "Presidio R", "Presidio F1"]
    total = sum(run.megabytes for run in runs)
    seconds = sum(run.seconds for run in runs)
    misses = "; ".join(f"{group}: {texts[0]!r}" for group, texts in ours.examples.items())
    theirs = ""
    if presidio is not None:
        wrong = [
            f"{g}: {t[0]!r}" for g, t in presidio.examples.items() if not g.startswith("missed")
        ]
        theirs = "; ".join(wrong)
    parts = [
        "# Masking benchmark: the proxy toolset's masker vs Presidio's pattern recognizers",
        "",
        f"## Labelled set: {sum(gold.values())} values in {len(cases) - negatives} sentences, "
        f"{negatives} hard negatives (en {languages['en']}, ru {languages['ru']}, "
        f"zh {languages['zh']} sentences)",
        "",
        markdown_table(quality_header, quality_rows(ours, presidio, gold)),
        "",
        f"LDIMS took {ours.seconds * 1000:.1f} ms for the {len(cases)} sentences"
        + (f"; Presidio's four recognizers {presidio.seconds * 1000:.1f} ms." if presidio else "."),
        "",
        "## Hard negatives: false positives per kind of look-alike",
        "",
        markdown_table(
            ["look-alike", "sentences", "LDIMS masks", "Presidio masks"],
            negative_rows(cases, ours, presidio),
        ),
        "",
        "## The floor the checks leave: random numbers of the right shape that get masked",
        "",
        markdown_table(["random numbers", "n", "masked"], floor_rows(args.seed, args.floor)),
        "",
        "## Throughput on real text (what is found there is a false positive or a public number)",
        "",
        markdown_table(
            [
                "text",
                "MB",
                "pieces",
                "LDIMS MB/s",
                "LDIMS ms per 10 KB",
                "LDIMS masks",
                "Presidio MB/s",
                "Presidio finds",
            ],
            throughput_rows(runs),
        ),
        "",
        f"All real text: {total:.2f} MB at **{total / seconds:.1f} MB/s** "
        f"({seconds / (total * 1e6) * 1e7:.2f} ms per 10 KB; the target is about 1 ms).",
        "",
        *(
            f"- Found by LDIMS in {run.name}: {'; '.join(run.examples)}."
            for run in runs
            if run.examples
        ),
        f"- Presidio: {presidio_note}. It covers `email`, `phone`, `card` and `iban` only: no "
        "Russian INN, SNILS or passport, no Chinese resident ID, no API keys, JWTs, bearer "
        "tokens, private keys or passwords (among its other recognizers are US, UK, Indian, "
        "Spanish… ids, none Russian or Chinese).",
        "- Matching: a found span counts when it overlaps a gold span of the same kind; gold "
        "spans of `password` and `token` are the value only.",
        "- The sentences were written together with the masker, so its perfect rows say that it "
        "does what it was built to do, not that real text holds no other forms. It does not mask "
        "by design or does not know: a 10-digit (company) INN without «ИНН»/INN/税号 near it "
        "(see the floor: one random number in ten passes), bare digit runs as phones without a "
        "word such as «тел.»/phone/电话 (except Chinese mobiles), passwords in prose without a "
        "separator («my password is x»), full-width digits, IBANs in lower case, e-mail "
        "addresses with Chinese characters.",
        f"- LDIMS misses and false positives (first of each): {misses or 'none'}.",
        f"- Presidio's false positives (first of each group): {theirs or 'none'}.",
        "",
        machine_line(),
        "",
        f"Command: `{command_line(args)}`",
    ]
    return "\n".join(parts) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--per-kind", type=int, default=27, help="positive sentences per kind")
    parser.add_argument("--per-negative", type=int, default=12, help="sentences per look-alike")
    parser.add_argument("--floor", type=int, default=2000, help="random numbers per shape")
    parser.add_argument("--chunk", type=int, default=10_000, help="characters per real piece")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the real text")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = positives(args.seed, args.per_kind) + negatives(args.seed, args.per_negative)
    print(f"{len(cases)} labelled sentences; scoring LDIMS ...", flush=True)
    ours = evaluate(cases, ldims_finder)
    finder, note = presidio_finder()
    if finder is None:
        print(f"Presidio row skipped: {note}", flush=True)
    presidio = evaluate(cases, finder) if finder else None
    runs = []
    for name, relative in REAL_TEXTS:
        print(f"throughput: {name} ...", flush=True)
        runs.append(throughput(name, CORPUS / relative, args, finder))
    publish(report(args, cases, ours, presidio, note, runs), RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
