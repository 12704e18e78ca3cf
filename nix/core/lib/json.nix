# Text writers: pretty JSON (the contract's files) and Nix (node configuration.nix).
let
  inherit (builtins)
    attrNames concatStringsSep isAttrs isBool isInt isList isString match
    replaceStrings stringLength toJSON;

  # Pretty-print a JSON-able value: two-space indent, keys sorted (as
  # builtins.toJSON sorts them), and a final newline. Deterministic.
  toPrettyJSON = value:
    let
      go = indent: v:
        let inner = indent + "  "; in
        if isAttrs v && attrNames v != [ ] then
          "{\n"
          + concatStringsSep ",\n" (map (k: inner + toJSON k + ": " + go inner v.${k}) (attrNames v))
          + "\n" + indent + "}"
        else if isList v && v != [ ] then
          "[\n" + concatStringsSep ",\n" (map (x: inner + go inner x) v) + "\n" + indent + "]"
        else toJSON v;
    in
    go "" value + "\n";

  # A float as a Nix literal that reads back as the same float: one with no
  # fraction that fits an integer is written as that integer (JSON Schema's
  # integer includes `500.0`); otherwise toJSON's text, with `.0` added where
  # it has no point (Nix's float literal needs one: `1e+20` is `1.0e+20`),
  # and a negative one in parentheses (in a list `-1.5` would subtract).
  floatLiteral = v:
    let
      integral = builtins.floor v == v && v >= -9.0e18 && v <= 9.0e18;
      text = toJSON v;
      parts = match "(-?[0-9]+)([eE].*)?" text;
      pointed =
        if parts == null then text
        else builtins.elemAt parts 0 + ".0" + (if builtins.elemAt parts 1 == null then "" else builtins.elemAt parts 1);
      literal = if integral then toString (builtins.floor v) else pointed;
    in
    if v < 0 then "(${literal})" else literal;

  # Nix source text for a value of strings, booleans, integers, null, lists
  # and attribute sets. Every string and key reads back exactly as it was
  # (docs/MODULE-SOURCE.md "Strings and keys"): strings are written in double
  # quotes with `\`, `"` and `${` escaped, and LF, CR and TAB as \n, \r, \t
  # (the Nix lexer reads a raw CR, or CR LF, as LF); every other character,
  # control characters and non-ASCII included, is written as it is, which
  # Nix reads literally. NUL cannot be in a Nix string at all (Slipway
  # refuses it at submit). A key is written bare only when it is a short
  # identifier that is not a keyword, and quoted like a string otherwise
  # (`builtins.match` recurses per character: on a key of a few hundred
  # thousand characters it overflows the stack).
  toNix = value:
    let
      str = s: "\"" + replaceStrings [ "\\" "\"" "\${" "\n" "\r" "\t" ] [ "\\\\" "\\\"" "\\\${" "\\n" "\\r" "\\t" ] s + "\"";
      keywords = [ "assert" "else" "if" "in" "inherit" "let" "or" "rec" "then" "with" ];
      key = k:
        if stringLength k <= 64 && match "[a-zA-Z_][a-zA-Z0-9_'-]*" k != null && !(builtins.elem k keywords)
        then k
        else str k;
      go = indent: v:
        let inner = indent + "  "; in
        if isAttrs v then
          if attrNames v == [ ] then "{ }"
          else "{\n" + concatStringsSep "" (map (k: inner + key k + " = " + go inner v.${k} + ";\n") (attrNames v)) + indent + "}"
        else if isList v then
          if v == [ ] then "[ ]"
          else "[\n" + concatStringsSep "" (map (x: inner + go inner x + "\n") v) + indent + "]"
        else if isString v then str v
        else if isBool v then (if v then "true" else "false")
        else if isInt v then (if v < 0 then "(${toString v})" else toString v)
        else if builtins.isFloat v then floatLiteral v
        else if v == null then "null"
        else throw "slipway: toNix cannot write a ${builtins.typeOf v}";
    in
    go "" value;
in
{
  inherit toPrettyJSON toNix;
}
