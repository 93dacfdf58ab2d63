#!/usr/bin/env bash
# What the tests need that no PyPI wheel carries: Tesseract's English, Russian and Chinese
# language data (OCR; the engine itself is in the tesserocr wheel), installed when missing
# (CI runs as root), and a CJK font the OCR tests render Chinese pages with, unpacked from
# Debian's package into tests/.fonts/ rather than installed: a system CJK font would change
# what PDFium itself reads of CJK PDFs (it maps fonts it otherwise cannot). A missing package
# fails `make test` here, clearly, rather than skipping the tests that need it.
set -euo pipefail
cd "$(dirname "$0")"
packages=(tesseract-ocr-eng tesseract-ocr-rus tesseract-ocr-chi-sim tesseract-ocr-osd fonts-dejavu-core)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
font=.fonts/wqy-microhei.ttc
if [ ! -s "$font" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && (apt-get download fonts-wqy-microhei >/dev/null 2>&1 || (apt-get update -qq && apt-get download fonts-wqy-microhei >/dev/null)))
  dpkg-deb -x "$work"/fonts-wqy-microhei_*.deb "$work/unpacked"
  mkdir -p .fonts
  cp "$work/unpacked/usr/share/fonts/truetype/wqy/wqy-microhei.ttc" "$font"
fi
